"""The `vllm` InferenceBackend: one vLLM engine per Ray actor (TP inside the engine).

A streamed update (protocols.WeightUpdate, then WeightBuckets): "weights" buckets (merged
weights by HF name, or an adapter's frozen base on the first sync and after a level-2
sleep) go straight into vLLM's layerwise reload as they arrive, opened at begin and
finalised at finish; "adapter" buckets are kept and served as one LoRA at finish. No
generate runs in between. The GPU transfers (CUDA IPC colocated, NCCL async) bypass the
buckets: the trainer drives them through `trainer_sender` and the transfer_* methods here.
"""
import os
import tempfile

from launcher.contract.protocols import Generation, GenerationRequest, WeightBucket, WeightUpdate
from launcher.contract.spec import ActorSpec
from launcher.rl.tokenizer import make_tokenizer
from launcher.workers.registry import ENGINES
from launcher.workers.vllm.adapter import write_adapter


@ENGINES.register("vllm")
class VllmInference:
    def __init__(self, spec: ActorSpec):
        config, engine_index = spec.config, spec.rank
        from launcher.workers.vllm.engine import VllmEngine

        tok = make_tokenizer(config.model)
        self.engine = VllmEngine(config, spec.plan, eos_id=tok.eos_id, pad_id=tok.pad_id,
                                 seed=config.run.seed + engine_index, engine_index=engine_index)
        # eos_id (one id) goes into a random-init model's config.json; requests stop on all of them.
        self.engine.eos_id = tok.eos_ids
        self._adapter_dir = tempfile.mkdtemp(prefix=f"vllm-adapter-{engine_index}-")
        self.index = engine_index
        self._update: WeightUpdate | None = None
        """The update between begin and finish (None otherwise)."""
        self._adapter_tensors: dict = {}

    def pid(self) -> int:
        return os.getpid()

    def generate(self, request: GenerationRequest) -> Generation:
        if self._update is not None:
            raise RuntimeError(f"vllm engine {self.index} was asked to generate in the middle of weight update "
                               f"{self._update.version} (begin without finish)")
        return self.engine.generate(request)

    def weight_transfer(self) -> str | None:
        return self.engine.transfer_backend

    def loaded_base(self) -> dict | None:
        return self.engine.loaded_base()

    def begin_weight_update(self, update: WeightUpdate) -> None:
        if update.adapter is not None and not update.with_base and not self.engine.has_weights:
            raise RuntimeError(f"vllm engine {self.index} dropped its weights (sleep level 2) and got only an "
                               "adapter; send the base with it (begin_export(with_base=True))")
        if self._reloads(update):
            self.engine.begin_weight_update()
        self._update, self._adapter_tensors = update, {}

    def load_weight_bucket(self, bucket: WeightBucket) -> int:
        if self._update is None:
            raise RuntimeError(f"vllm engine {self.index} got a weight bucket outside an update")
        if bucket.kind == "adapter":
            self._adapter_tensors.update(bucket.tensors)
            return len(bucket.tensors)
        return self.engine.load_weight_bucket(bucket.tensors)

    def finish_weight_update(self, version: int) -> None:
        update, adapter_tensors = self._update, self._adapter_tensors
        self._update, self._adapter_tensors = None, {}
        if update is None:
            raise RuntimeError(f"vllm engine {self.index}: finish_weight_update without begin")
        if self._reloads(update):
            self.engine.finish_weight_update(version)
        if update.adapter is not None:
            self.engine.load_adapter(write_adapter(self._adapter_dir, update.adapter, adapter_tensors), version)

    @staticmethod
    def _reloads(update: WeightUpdate) -> bool:
        """Whether model weights (not only an adapter) arrive: vLLM's layerwise reload is opened."""
        return update.adapter is None or update.with_base

    def sleep(self, level: int) -> None:
        self.engine.sleep(level)

    def wake(self) -> None:
        self.engine.wake()

    # GPU weight transfer steps, called by transfer.EngineGroupClient on the trainer side.

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
