"""The `vllm` InferenceBackend: one vLLM engine per Ray actor (TP inside the engine).

A streamed update (weight_sync.messages.WeightUpdate, then WeightBuckets) runs through
launcher/weight_sync/receive.py: "weights" buckets (merged weights by HF name, or an adapter's frozen base
on the first sync and after a level-2 sleep) go straight into vLLM's layerwise reload as
they arrive, opened at begin and finalised at finish; "adapter" buckets are kept and
served as one LoRA at finish. No generate runs in between, except an in-flight chunk
(inference.update_mode: in_flight), paused between two engine steps until finish. The GPU transfers (CUDA IPC
colocated, NCCL async) bypass the buckets: the trainer drives them through
`VllmTransfer.trainer_sender` (launcher/weight_sync/transports/vllm_engine.py) and the
transfer_* methods here.
"""
import tempfile

import torch

from launcher.contract.messages import Generation, GenerationRequest
from launcher.contract.spec import ActorSpec
from launcher.rl.tokenizer import make_tokenizer
from launcher.weight_sync.transports.base import Received
from launcher.workers.engine_base import EngineBase
from launcher.workers.registry import ENGINES
from launcher.workers.vllm.adapter import write_adapter


@ENGINES.register("vllm")
class VllmInference(EngineBase):
    def __init__(self, spec: ActorSpec):
        config, engine_index = spec.config, spec.rank
        super().__init__("vllm", spec)
        from launcher.workers.vllm.engine import VllmEngine

        tok = make_tokenizer(config.model)
        self.engine = VllmEngine(config, spec.plan, eos_id=tok.eos_id, pad_id=tok.pad_id,
                                 seed=config.run.seed + engine_index, engine_index=engine_index)
        # eos_id (one id) goes into a random-init model's config.json; requests stop on all of them.
        self.engine.eos_id = tok.eos_ids
        self._adapter_dir = tempfile.mkdtemp(prefix=f"vllm-adapter-{engine_index}-")
        self._transferring = False
        """Between transfer_start and a successful transfer_finish (the gate is held)."""

    def generate(self, request: GenerationRequest) -> Generation:
        """An in-flight request (inference.update_mode: in_flight) lets a weight update in
        between two engine steps (weight_sync/update_gate.py); any other waits for it."""
        if not request.in_flight:
            self._refuse_mid_update()
        with self.gate.in_flight() if request.in_flight else self.gate.holding():
            return self.engine.generate(request, boundary=self.gate.boundary if request.in_flight else None)

    def loaded_base(self) -> dict | None:
        return self.engine.loaded_base()

    # ---- weight update steps (weight_sync/receive.py runs the update) ----------------------------

    def _holds_weights(self) -> bool:
        return self.engine.has_weights

    def _begin_weights(self) -> None:
        self.engine.begin_weight_update()

    def _load_weights(self, received: Received, mapped: bool) -> None:
        self.engine.load_weight_bucket(received)

    def _finish_weights(self, version: int) -> None:
        self.engine.finish_weight_update(version)

    def _apply_adapter(self, adapter: dict, tensors: dict[str, torch.Tensor], version: int) -> None:
        self.engine.load_adapter(write_adapter(self._adapter_dir, adapter, tensors), version)

    def sleep(self, level: int) -> None:
        self.engine.sleep(level)

    def wake(self) -> None:
        self.engine.wake()

    # GPU weight transfer steps, called by vllm_engine.EngineGroupClient on the trainer side.
    # Like a streamed update, a transfer holds the model from start to finish: an in-flight
    # chunk pauses at its next engine step for it.

    def transfer_init(self, init_info: dict) -> None:
        self.engine.transfer_init(init_info)

    def transfer_start(self) -> None:
        if not self._transferring:  # a failed transfer still holds the gate
            self.gate.hold()
            self._transferring = True
        self._transfer_step(self.engine.transfer_start)

    def transfer_update(self, update_info: dict) -> None:
        self._transfer_step(self.engine.transfer_update, update_info)

    def transfer_finish(self, weight_version: str | None) -> None:
        self._transfer_step(self.engine.transfer_finish, weight_version)
        self._transferring = False
        self.gate.release()

    def _transfer_step(self, step, *args) -> None:
        """A failed step leaves the weights half-written: a chunk paused for it fails too."""
        try:
            step(*args)
        except Exception as err:
            self.gate.fail(f"{self.who}: GPU weight transfer failed ({type(err).__name__}: {err}), so the chunk it "
                           "paused cannot go on on half-loaded weights")
            raise

    def transfer_shutdown(self) -> None:
        self.engine.transfer_shutdown()
