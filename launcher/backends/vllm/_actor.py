"""The `vllm` InferenceBackend: one vLLM engine per Ray actor (TP inside the engine).

Merged weights (WeightUpdate.tensors by HF name) are streamed into the engine in
size-bounded buckets through vLLM's layerwise reload; an adapter update loads its base
first when one is sent (first sync, after a level-2 sleep), then serves the adapter.
The GPU transfers (CUDA IPC colocated, NCCL async) bypass update_weights: the trainer
drives them through `trainer_sender` and the transfer_* methods here.
"""
import os
import tempfile

from launcher.backends.protocols import Generation, GenerationRequest, WeightUpdate
from launcher.backends.registry import ENGINES
from launcher.backends.vllm._adapter import write_adapter
from launcher.backends.vllm._buckets import buckets
from launcher.plan import make_plan
from launcher.rl.tokenizer import make_tokenizer


@ENGINES.register("vllm")
class VllmInference:
    def __init__(self, config, engine_index: int):
        from launcher.backends.vllm._engine import VllmEngine

        tok = make_tokenizer(config.model.hf_path, config.model.arch.vocab_size)
        self.engine = VllmEngine(config, make_plan(config), eos_id=tok.eos_id, pad_id=tok.pad_id,
                                 seed=config.run.seed + engine_index, engine_index=engine_index)
        self._adapter_dir = tempfile.mkdtemp(prefix=f"vllm-adapter-{engine_index}-")

    def pid(self) -> int:
        return os.getpid()

    def generate(self, request: GenerationRequest) -> Generation:
        return self.engine.generate(request)

    def update_weights(self, update: WeightUpdate) -> None:
        if update.adapter is None:
            self._load_merged(update.tensors, update.version)
            return
        if update.base is not None:
            self._load_merged(update.base, update.version)
        self.engine.load_adapter(write_adapter(self._adapter_dir, update.adapter, update.tensors), update.version)

    def _load_merged(self, tensors: dict, version: int) -> None:
        self.engine.begin_weight_update()
        for bucket in buckets(tensors.items()):
            self.engine.load_weight_bucket(bucket)
        self.engine.finish_weight_update(version)

    def sleep(self, level: int) -> None:
        self.engine.sleep(level)

    def wake(self) -> None:
        self.engine.wake()

    # GPU weight transfer steps, called by _transfer.EngineGroupClient on the trainer side.

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
