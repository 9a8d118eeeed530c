"""The `hf` inference engine: seeded sampling with per-token log-probs, streamed weight
updates from the trainer (merged weights or a LoRA adapter, in buckets), and sleep/wake
for colocation.

A "weights" bucket is loaded into the model as it arrives (a partial load_state_dict);
"adapter" buckets are kept until finish, which wraps the model with peft on the first
adapter and loads it. Generating between begin and finish is an error. A CUDA IPC bucket
(this engine on trainer rank 0's GPU) is mapped from the trainer's device buffer and copied
device to device; what outlives the call (adapter tensors, parts of a fused weight whose
other parts come in a later bucket) is copied out first, as the trainer then frees the buffer.

Sleep level 1 moves the weights to host RAM (a no-op when the device is the CPU); level 2
drops them, and the next weight update brings them back. Generating while asleep is an error.
"""
import os

import torch

from launcher.contract.base_identity import checkpoint_base
from launcher.contract.protocols import Generation, GenerationRequest, WeightBucket, WeightUpdate
from launcher.contract.spec import ActorSpec
from launcher.rl.tokenizer import make_tokenizer
from launcher.workers.hf import lora
from launcher.workers.hf.model import VISION_PREFIX, build_model
from launcher.workers.hf.names import ModelNameAssembler
from launcher.workers.hf.sampling import sample
from launcher.workers.ipc import open_bucket
from launcher.workers.manifest import SyncManifest
from launcher.workers.registry import ENGINES


@ENGINES.register("hf")
class HfEngine:
    def __init__(self, spec: ActorSpec):
        config, engine_index = spec.config, spec.rank
        if "OMP_NUM_THREADS" in os.environ:
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        if config.inference.tp != 1:
            raise ValueError(f"inference.tp={config.inference.tp}: the hf engine runs on one device; use tp 1 "
                             "or the vllm backend")
        self.index = engine_index
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        tok = make_tokenizer(config.model)
        # Every EOS id of the checkpoint's generation_config (GLM: <|endoftext|>, <|user|>, <|observation|>).
        self.eos_ids, self.pad_id = tok.eos_ids, tok.pad_id
        self.model = build_model(config.model, tok.pad_id, config.run.seed).to(self.device).eval()
        self.checkpoint = checkpoint_base(config.model.hf_path)
        """The folder the weights were loaded from ({"hf_path", "sha256"}); None: random init."""
        self.version = 0
        self.asleep_level = 0
        self.has_weights = True
        self._update: WeightUpdate | None = None
        """The update between begin and finish (None otherwise)."""
        self._adapter_tensors: dict = {}
        self._names: ModelNameAssembler | None = None
        self._manifest: SyncManifest | None = None
        """Checkpoint names received by this update's "weights" buckets (None: none yet)."""

    def pid(self) -> int:
        return os.getpid()

    def generate(self, request: GenerationRequest) -> Generation:
        if self.asleep_level:
            raise RuntimeError(f"engine {self.index} was asked to generate while asleep (level {self.asleep_level})")
        if self._update is not None:
            raise RuntimeError(f"engine {self.index} was asked to generate in the middle of weight update "
                               f"{self._update.version} (begin without finish)")
        results = sample(self.model, request.prompts, request.sampling, self.eos_ids, self.pad_id, request.seed)
        return Generation(tokens=[r.tokens for r in results], logprobs=[r.logprobs for r in results],
                          finished=[r.finished for r in results], policy_version=self.version)

    def weight_transfer(self) -> str | None:
        return None  # buckets only

    def loaded_base(self) -> dict | None:
        """The checkpoint whose weights the engine serves, while it holds them (not after a
        level-2 sleep): the driver then skips pushing the same frozen base (weight_sync.py)."""
        return self.checkpoint if self.has_weights else None

    def begin_weight_update(self, update: WeightUpdate) -> None:
        restores = update.adapter is None or update.with_base
        if not self.has_weights:
            if not restores:
                raise RuntimeError(f"engine {self.index} dropped its weights (sleep level 2) and got only an "
                                   "adapter; send the base with it (begin_export(with_base=True))")
            self.model.to_empty(device="cpu" if self.asleep_level else self.device)
        self._update, self._adapter_tensors, self._manifest = update, {}, None

    def load_weight_bucket(self, bucket: WeightBucket) -> int:
        if self._update is None:
            raise RuntimeError(f"engine {self.index} got a weight bucket outside an update")
        mapped = bucket.ipc is not None
        received = open_bucket(bucket.ipc, self.device, f"hf engine {self.index}") if mapped else bucket.tensors
        if bucket.kind == "adapter":
            self._adapter_tensors.update((n, t.clone() if mapped else t) for n, t in received)
        else:
            if self._manifest is None:
                self._manifest = SyncManifest(self._assembler().expected, who=f"hf engine {self.index}")
            known = [(n, t) for n, t in received if self._manifest.add(n, tuple(t.shape))]
            self._load_full(dict(known))
            if mapped:
                self._own_pending({n for n, _ in known})
        return len(received)

    def _own_pending(self, names: set[str]) -> None:
        """Copy out the parts of not yet complete in-memory tensors that arrived in a CUDA IPC
        bucket (views of the trainer's buffer, which is freed once this load returns)."""
        for group in self._assembler().pending.values():
            for name in names & group.keys():
                group[name] = group[name].clone()

    def finish_weight_update(self, version: int) -> None:
        update, adapter_tensors, manifest = self._update, self._adapter_tensors, self._manifest
        self._update, self._adapter_tensors, self._manifest = None, {}, None
        if update is None:
            raise RuntimeError(f"engine {self.index}: finish_weight_update without begin")
        if self._names is not None:
            self._names.pending.clear()
        if manifest is not None:
            # Weights arrived: a full or merged update, or an adapter's base, ships every
            # checkpoint tensor. (An update without weight buckets only announces a version.)
            manifest.check(version, full=True)
        if update.adapter is not None:
            if not hasattr(self.model, "peft_config"):
                self.model = lora.wrap(self.model, update.adapter).eval()
            lora.load_adapter(self.model, adapter_tensors)
        self.has_weights = True
        self.version = version

    def _base_model(self):
        return self.model.get_base_model() if hasattr(self.model, "peft_config") else self.model

    def _assembler(self) -> ModelNameAssembler:
        """Built once: which checkpoint tensors make each of the model's in-memory tensors."""
        if self._names is None:
            base = self._base_model()
            shapes = {k: v.shape for k, v in base.state_dict().items()
                      if not k.startswith(VISION_PREFIX) and "lora_" not in k}
            shapes = {k.replace(".base_layer.", "."): v for k, v in shapes.items()}
            self._names = ModelNameAssembler(base, shapes)
        return self._names

    def _load_full(self, checkpoint_tensors: dict[str, torch.Tensor]) -> None:
        """Checkpoint-named tensors in; each in-memory tensor is loaded once all its parts are in."""
        tensors = self._assembler().add(checkpoint_tensors)
        if not tensors:
            return
        target = self._base_model()
        if hasattr(self.model, "peft_config"):
            tensors = lora.to_peft_names(target, tensors)
        result = target.load_state_dict(tensors, strict=False)
        if result.unexpected_keys:
            raise ValueError(f"weights the engine's model does not have: {result.unexpected_keys[:5]}")

    def sleep(self, level: int) -> None:
        if level >= 1 and self.device.type == "cuda":
            self.model.to("cpu")
            torch.cuda.empty_cache()
        if level >= 2:
            self.model.to_empty(device="meta")
            self.has_weights = False
        self.asleep_level = level

    def wake(self) -> None:
        if not self.has_weights:
            raise RuntimeError(f"engine {self.index} woke from sleep level 2 without a weight update")
        self.model.to(self.device)
        self.asleep_level = 0
