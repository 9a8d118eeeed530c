"""Methods mixed into every vLLM worker (engine arg worker_extension_cls) for bucketed weight sync.

The engine calls them with `collective_rpc`, so with TP > 1 each worker receives the
same bucket and vLLM's loaders keep only its own shard. A bucket holds HF-named tensors
of bounded total size, so no side ever holds a second full copy of the model: buckets
stream in and each is loaded and released before the next.

Loading goes through vLLM's layerwise reload lifecycle (what its own `reload_weights`
and NCCL weight transfer use): after the first load, platforms repack weights into
kernel layouts (the CPU backend does), so a plain `load_weights` on the live model
fails. The lifecycle restores checkpoint-format parameters, buffers each layer's
weights until the layer is complete, then processes and copies them into the kernel
tensors in place. This path works on any device (the CPU tests use it); on GPUs the
faster CUDA-IPC and NCCL transfers are vLLM's own weight-transfer engines
(launcher/weight_sync/transports/vllm_engine.py).

Each method that loads runs under the worker's `set_current_vllm_config`, as vLLM runs its
own loads (worker_base.init_worker, the model loader): collective_rpc calls a method
without it, and layers read the current config while loading and processing weights (the
fused-MoE kernels' quant and parallel settings; 0.32's get_current_vllm_config raises
outside one).

vLLM imports this module in every worker process before it builds the model (the worker
extension is resolved in worker_base.init_worker), so a TP > 1 engine's Ray workers apply
the GLM LoRA patch here when the engine asked for it (glm_lora_patch.PATCH_ENV).
"""
import os
from contextlib import contextmanager

import torch

from launcher.vllm_release import installed_release
from launcher.workers.vllm.glm_lora_patch import PATCH_ENV, apply_glm_lora_patch
from launcher.workers.vllm.lora_load import let_lora_wrappers_load

if os.environ.get(PATCH_ENV) == "1":
    apply_glm_lora_patch()


def clear_derived_caches(model, names: tuple[str, ...]) -> int:
    """Reset every attribute `names` (the installed release's stale_derived_caches,
    launcher/vllm_release.py) of `model`'s modules to None, so the next forward rebuilds it from
    the new weights; modules without them are untouched."""
    cleared = 0
    for module in model.modules():
        for attr in names:
            if getattr(module, attr, None) is not None:
                setattr(module, attr, None)
                cleared += 1
    return cleared


class WeightSyncExtension:
    @contextmanager
    def _worker_config(self):
        """The worker's VllmConfig as vLLM's current config (WorkerBase.vllm_config)."""
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(self.vllm_config):
            yield

    def begin_weight_reload(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        let_lora_wrappers_load()  # 0.26: base weights into layers vLLM wrapped in LoRA (lora_load.py)
        with self._worker_config():
            initialize_layerwise_reload(self.model_runner.get_model())

    def load_weight_bucket(self, named: list[tuple[str, torch.Tensor]]) -> int:
        """Load one bucket of HF-named tensors; returns how many were given.

        `load_weights` maps HF names onto vLLM's fused parameters (q/k/v into qkv_proj,
        gate/up into gate_up_proj, experts into their stacked tensors) and copies onto
        the parameter's device, so CPU tensors from the object store load onto GPUs too.
        """
        with self._worker_config():
            self.model_runner.get_model().load_weights(weights=iter(named))
        return len(named)

    def finish_weight_reload(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        with self._worker_config():
            finalize_layerwise_reload(self.model_runner.get_model(), self.model_config)
        self.clear_derived_caches()

    def clear_derived_caches(self) -> int:
        """After every finished update (bucketed here; the engine calls it after GPU transfers):
        only what the installed release leaves stale (0.34 refills its caches itself)."""
        return clear_derived_caches(self.model_runner.get_model(), installed_release().stale_derived_caches)
