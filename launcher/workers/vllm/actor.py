"""The `vllm` InferenceBackend: one vLLM engine per Ray actor (TP inside the engine).

A streamed update (weight_sync.messages.WeightUpdate, then WeightBuckets) runs through
launcher/weight_sync/receive.py: "weights" buckets (merged weights by HF name, or an adapter's frozen base
on the first sync and after a level-2 sleep) go straight into vLLM's layerwise reload as
they arrive, opened at begin and finalised at finish; "adapter" buckets are kept and
served as one LoRA at finish. No generate runs in between. The GPU transfers (CUDA IPC
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

    def generate(self, request: GenerationRequest) -> Generation:
        self._refuse_mid_update()
        return self.engine.generate(request)

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

    def transfer_init(self, init_info: dict) -> None:
        self.engine.transfer_init(init_info)

    def transfer_start(self) -> None:
        self.engine.transfer_start()

    def transfer_update(self, update_info: dict) -> None:
        self.engine.transfer_update(update_info)

    def transfer_finish(self, weight_version: str | None) -> None:
        self.engine.transfer_finish(weight_version)

    def transfer_shutdown(self) -> None:
        self.engine.transfer_shutdown()
