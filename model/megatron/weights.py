"""Load HF weights into a (sharded) GlmModel and export HF-named weights from it.

Export gathers every shard (a collective: call it on every rank); adapters are merged into
the exported weights when the model carries LoRA (model.megatron.lora), so what leaves
is always a plain HF state dict. `hf_stream` yields it one tensor at a time, which is how
weight sync sends it (never the whole model at once).
"""
from collections.abc import Iterator

import torch

from model.megatron.mapping import hf_parts, megatron_from_hf, name_table
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


def hf_stream(model: torch.nn.Module, merged: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Whole HF-named tensors in the name table's order (layer by layer), LoRA merged in when
    `merged`. Each Megatron tensor is gathered when reached: a collective, so every rank
    iterates this in lockstep."""
    tensors = base_tensors(model)
    owners = {f"{name}.weight": module for name, module in model.named_modules()
              if merged and hasattr(module, "merged_weight")}
    for mname, hnames in name_table(model.spec):
        owner = owners.get(mname)
        with torch.no_grad():  # not around the yields: grad mode stays the caller's between items
            full = gather_full(tensors[mname], owner.merged_weight() if owner is not None else None)
        yield from hf_parts(mname, hnames, full)
        del full


def export_hf_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Whole HF-named tensors on every rank; LoRA adapters merged in."""
    return dict(hf_stream(model, merged=True))
