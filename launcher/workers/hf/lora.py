"""LoRA for the hf backends through peft: targets, merged export and adapter export.

Recipes name targets the Megatron way (the GLM-5.3-Flash recipes are written for it);
this maps them to the HF module names. Routed experts are fused 3-D parameters in HF's
glm5_next, which peft's Linear LoRA cannot wrap, so the hf backend adapts everything
else (attention, KDA, dense and shared-expert MLPs).
"""
from collections.abc import Iterator

import torch

ADAPTER_NAME = "default"


def wrap(model: torch.nn.Module, kwargs: dict) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(**kwargs))


def _base_name(peft_name: str) -> str:
    return peft_name.removeprefix("base_model.model.").replace(".base_layer.", ".")


def merged_items(peft_model, skip_prefix: str, with_delta: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Base weights with W + scale * B @ A folded in (unless not `with_delta`), under the
    plain model's names, one at a time in module order: only the merged tensor being
    yielded is new memory (the others are the live base tensors).

    Computed functionally (peft's merge/unmerge would add and subtract the delta in place,
    drifting the frozen base in floating point and breaking exact resumption).
    """
    from peft.tuners.lora import LoraLayer

    adapted = {}
    if with_delta:
        adapted = {_base_name(name) + ".weight": module for name, module in peft_model.named_modules()
                   if isinstance(module, LoraLayer) and ADAPTER_NAME in module.lora_A}
    for name, tensor in peft_model.state_dict().items():
        base = _base_name(name)
        if "lora_" in name or base.startswith(skip_prefix):
            continue
        if base in adapted:
            with torch.no_grad():  # not around the yield: grad mode is the caller's between items
                tensor = tensor + adapted[base].get_delta_weight(ADAPTER_NAME)
        yield base, tensor.detach()


def merged_state(peft_model, skip_prefix: str, with_delta: bool = True) -> dict[str, torch.Tensor]:
    """merged_items as a dict of copies."""
    return {name: tensor.clone() for name, tensor in merged_items(peft_model, skip_prefix, with_delta)}


def adapter_state(peft_model) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}


def load_adapter(peft_model, tensors: dict[str, torch.Tensor]) -> None:
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(peft_model, tensors)
    unexpected = [k for k in result.unexpected_keys if "lora_" in k]
    if unexpected:
        raise ValueError(f"adapter tensors the engine's model does not have: {unexpected[:5]}")


def to_peft_names(base_model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Plain parameter names -> the wrapped model's (`...q_proj.weight` -> `...q_proj.base_layer.weight`)."""
    have = set(base_model.state_dict())
    out = {}
    for name, tensor in tensors.items():
        wrapped = name.rsplit(".", 1)[0] + ".base_layer." + name.rsplit(".", 1)[1]
        out[wrapped if wrapped in have and name not in have else name] = tensor
    return out
