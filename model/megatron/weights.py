"""Load HF weights into a (sharded) GlmModel and export HF-named weights from it.

Export gathers every shard (a collective: call it on every rank); adapters are merged into
the exported weights when the model carries LoRA (model.megatron.lora), so what leaves
is always a plain HF state dict.
"""
import torch

from model.megatron.mapping import hf_from_megatron, megatron_from_hf
from model.megatron.shards import gather_full, shard_of


def base_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers that the HF checkpoint has (LoRA adapters excluded)."""
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    return {name: t for name, t in tensors.items() if ".lora_" not in name}


def load_hf_state(model: torch.nn.Module, hf_state: dict[str, torch.Tensor]) -> None:
    """Copy an HF glm5_next state dict (language model part) into this rank's shards."""
    full = megatron_from_hf(hf_state, model.spec)
    tensors = base_tensors(model)
    if set(full) != set(tensors):
        raise KeyError(f"mapping mismatch: only in HF {sorted(set(full) - set(tensors))[:5]}, "
                       f"only in Megatron {sorted(set(tensors) - set(full))[:5]}")
    with torch.no_grad():
        for name, tensor in tensors.items():
            tensor.copy_(shard_of(full[name], tensor).to(tensor.dtype))


def export_hf_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Whole HF-named tensors on every rank; LoRA adapters merged in."""
    merged = {}
    for module_name, module in model.named_modules():
        if hasattr(module, "merged_weight"):
            merged[f"{module_name}.weight"] = module
    full = {}
    for name, tensor in base_tensors(model).items():
        owner = merged.get(name)
        full[name] = gather_full(tensor, owner.merged_weight() if owner is not None else None)
    return hf_from_megatron(full, model.spec)
