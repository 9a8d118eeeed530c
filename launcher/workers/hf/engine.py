"""The `hf` inference engine: seeded sampling with per-token log-probs, streamed weight
updates from the trainer (merged weights or a LoRA adapter, in buckets), and sleep/wake
for colocation.

launcher/weight_sync/receive.py runs each update (begin, buckets, finish; each bucket opened
by its transport); the steps here: a "weights" bucket is loaded into the model as it arrives
(a partial load_state_dict), and the adapter kept until finish wraps the model with peft on
the first adapter and loads. A CUDA IPC bucket (this engine on trainer rank 0's GPU) is
mapped from the trainer's device buffer and copied device to device; what outlives the
call (adapter tensors, parts of a fused weight whose other parts come in a later bucket)
is copied out first, as the trainer then frees the buffer.

An engine whose first weights come by sync (plan.startup: random init, or merged/full sync,
which re-sends every weight anyway) builds its model empty: no parameter is allocated or
initialized until the first update gives them storage on the device (model.materialize).

Sleep level 1 moves the weights to host RAM (a no-op when the device is the CPU); level 2
drops them, and the next weight update brings them back straight onto the device (the
planner's first-sync phase: the trainer's weights, the engine's and the transfer buckets).
Generating while asleep or before any weights arrived is an error.
"""
import os

import torch

from launcher.contract.messages import Generation, GenerationRequest
from launcher.contract.spec import ActorSpec
from launcher.rl.tokenizer import make_tokenizer
from launcher.weight_sync.manifest import SyncManifest
from launcher.weight_sync.receive import ServedWeights
from launcher.weight_sync.transports.base import Received
from launcher.workers.engine_base import EngineBase
from launcher.workers.hf import lora
from launcher.workers.hf.indexer_topk import IndexerRecorder
from launcher.workers.hf.model import VISION_PREFIX, build_model, drop_parameters, materialize
from launcher.workers.hf.names import ModelNameAssembler
from launcher.workers.hf.routing import RouteRecorder
from launcher.workers.hf.sampling import sample
from launcher.workers.registry import ENGINES


@ENGINES.register("hf")
class HfEngine(EngineBase, ServedWeights):
    def __init__(self, spec: ActorSpec):
        config = spec.config
        EngineBase.__init__(self, "hf", spec)
        if "OMP_NUM_THREADS" in os.environ:
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        tok = make_tokenizer(config.model)
        # Every EOS id of the checkpoint's generation_config (GLM: <|endoftext|>, <|user|>, <|observation|>).
        self.eos_ids, self.pad_id = tok.eos_ids, tok.pad_id
        reads_checkpoint = spec.plan.startup.engine_reads_checkpoint
        self.progress.phase("reading checkpoint" if reads_checkpoint else "building (empty: weights come by sync)")
        self.model = build_model(config.model, tok.pad_id, config.run.seed, self.device,
                                 empty=not reads_checkpoint).eval()
        ServedWeights.__init__(self, config.model.hf_path if reads_checkpoint else None)
        self.has_weights = reads_checkpoint
        self.progress.phase("ready")
        self.asleep_level = 0
        self.returns_routes = config.algorithm.routing_replay or config.algorithm.routing_agreement
        """Each generation carries its MoE routes (hf/routing.py) for the trainer's replay or agreement."""
        self.returns_indexer_topk = config.algorithm.indexer_replay or config.algorithm.indexer_agreement
        """Each generation carries its DSA indexer's pools (hf/indexer_topk.py), likewise."""
        self._names: ModelNameAssembler | None = None
        self._manifest: SyncManifest | None = None
        """Checkpoint names received by this update's "weights" buckets (None: none yet)."""

    def generate(self, request: GenerationRequest) -> Generation:
        if self.asleep_level:
            raise RuntimeError(f"{self.who} was asked to generate while asleep (level {self.asleep_level})")
        if not self.has_weights:
            raise RuntimeError(f"{self.who} was asked to generate before any weight update (it starts empty)")
        if not request.in_flight:  # an in-flight request waits at the gate until the update is finished
            self._refuse_mid_update()
        recorders = self._recorders()
        try:
            with self.gate.in_flight() if request.in_flight else self.gate.holding():
                results = sample(self.model, request.prompts, request.sampling, self.eos_ids, self.pad_id,
                                 request.seed, recorders, self._token_boundary(request.in_flight))
        finally:
            for recorder in recorders.values():
                recorder.remove()
        return Generation(tokens=[r.tokens for r in results], logprobs=[r.logprobs for r in results],
                          finished=[r.finished for r in results], policy_version=min(min(r.versions) for r in results),
                          token_versions=[r.versions for r in results],
                          routes=[r.routes for r in results] if "routes" in recorders else None,
                          indexer_topk=[r.indexer_topk for r in results] if "indexer_topk" in recorders else None)

    def _token_boundary(self, in_flight: bool):
        """sampling.py's boundary: before each forward, the policy version of the weights it
        runs on; an in-flight request first lets a waiting weight update in (weight_sync/update_gate.py)."""

        def boundary() -> int:
            if in_flight:
                self.gate.boundary()
            return self.version

        return boundary

    def _recorders(self) -> dict:
        """Hooks for this request's routes and indexer pools (sampling.py's Sampled fields)."""
        recorders = {"routes": RouteRecorder(self.model)} if self.returns_routes else {}
        if self.returns_indexer_topk:
            recorders["indexer_topk"] = IndexerRecorder(self.model)
        return recorders

    # ---- weight update steps (weight_sync/receive.py runs the update) ----------------------------

    def _holds_weights(self) -> bool:
        return self.has_weights

    def _begin_weights(self) -> None:
        """Each update starts clean: a new manifest, and no parts of fused tensors left by a
        failed one."""
        if not self.has_weights:
            materialize(self.model, "cpu" if self.asleep_level == 1 else self.device)
        self._manifest = None
        if self._names is not None:
            self._names.pending.clear()

    def _load_weights(self, received: Received, mapped: bool) -> None:
        if self._manifest is None:
            self._manifest = SyncManifest(self._assembler().expected, who=self.who)
        known = [(n, t) for n, t in received if self._manifest.add(n, tuple(t.shape))]
        self._load_full(dict(known))
        if mapped:
            self._own_pending({n for n, _ in known})

    def _own_pending(self, names: set[str]) -> None:
        """Copy out the parts of not yet complete in-memory tensors that arrived in a CUDA IPC
        bucket (views of the trainer's buffer, which is freed once this load returns)."""
        for group in self._assembler().pending.values():
            for name in names & group.keys():
                group[name] = group[name].clone()

    def _finish_weights(self, version: int) -> None:
        manifest, self._manifest = self._manifest, None
        if manifest is not None:
            # Weights arrived: a full or merged update, or an adapter's base, ships every
            # checkpoint tensor. (An update without weight buckets only announces a version.)
            manifest.check(version, full=True)
        self.has_weights, self.version = True, version

    def _apply_adapter(self, adapter: dict, tensors: dict[str, torch.Tensor], version: int) -> None:
        if not hasattr(self.model, "peft_config"):
            self.model = lora.wrap_for_loading(self.model, adapter).eval()
        lora.load_adapter(self.model, tensors)
        self.version = version

    def _plain_parameters(self, base) -> dict[str, torch.Tensor]:
        """The model's parameters under the plain in-memory names the assembler uses (PEFT's
        `.base_layer.` taken out); looked up per bucket, since a wake from sleep level 2
        gives every parameter new storage."""
        return {lora.plain_name(name): param for name, param in base.named_parameters()}

    def _base_model(self):
        return self.model.get_base_model() if hasattr(self.model, "peft_config") else self.model

    def _assembler(self) -> ModelNameAssembler:
        """Built once: which checkpoint tensors make each of the model's in-memory tensors."""
        if self._names is None:
            base = self._base_model()
            shapes = {k: v.shape for k, v in base.state_dict().items()
                      if not k.startswith(VISION_PREFIX) and "lora_" not in k}
            shapes = {lora.plain_name(k): v for k, v in shapes.items()}
            self._names = ModelNameAssembler(base, shapes)
        return self._names

    def _load_full(self, checkpoint_tensors: dict[str, torch.Tensor]) -> None:
        """Checkpoint-named tensors in; each in-memory tensor is loaded once all its parts are in."""
        target = self._base_model()
        tensors = self._assembler().add(checkpoint_tensors, parameters=self._plain_parameters(target))
        if not tensors:
            return
        if hasattr(self.model, "peft_config"):
            tensors = lora.to_peft_names(target, tensors)
        result = target.load_state_dict(tensors, strict=False)
        if result.unexpected_keys:
            raise ValueError(f"weights the engine's model does not have: {result.unexpected_keys[:5]}")

    def sleep(self, level: int) -> None:
        if level >= 2:
            drop_parameters(self.model)
            self.has_weights = False
        elif level == 1 and self.has_weights and self.device.type == "cuda":
            self.model.to("cpu")
        if level >= 1 and self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.asleep_level = level

    def wake(self) -> None:
        if not self.has_weights:
            raise RuntimeError(f"{self.who} woke from sleep level 2 without a weight update")
        self.model.to(self.device)
        self.asleep_level = 0
