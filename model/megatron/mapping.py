"""Applies the name table (model/names.py) to tensors: whole Megatron tensors <-> the
checkpoint tensors they are made of. Sharding is separate (shards.py: read off each
parameter's attributes), so neither knows TP, EP or ETP.

megatron-bridge 0.6.2 is not used: it pins transformers <= 5.12.1 (glm5_next needs >= 5.16)
and imports TransformerEngine, which the training machines here do not have.
"""
import torch

from model.names import CONV, EXPERTS, name_table


def split(kind: str, names: tuple[str, ...], whole: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The checkpoint tensors one whole Megatron tensor is (the inverse of compose)."""
    if kind == EXPERTS:
        return [(n.format(e=e), part) for e in range(whole.shape[0])
                for n, part in zip(names, whole[e].chunk(len(names), dim=0), strict=True)]
    parts = whole.chunk(len(names), dim=0)
    if kind == CONV:
        parts = [p.unsqueeze(1) for p in parts]
    return list(zip(names, parts, strict=True))


def compose(kind: str, names: tuple[str, ...], tensors: dict[str, torch.Tensor], experts: int) -> torch.Tensor:
    """The whole Megatron tensor from its checkpoint tensors (tests and gradient checks)."""
    if kind == EXPERTS:
        return torch.stack([torch.cat([tensors[n.format(e=e)] for n in names]) for e in range(experts)])
    parts = [tensors[n].squeeze(1) if kind == CONV else tensors[n] for n in names]
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def megatron_from_hf(hf_state: dict[str, torch.Tensor], spec) -> dict[str, torch.Tensor]:
    """Whole (unsharded) Megatron tensors from checkpoint-named tensors."""
    return {mname: compose(kind, names, hf_state, spec.n_routed_experts) for mname, kind, names in name_table(spec)}


def hf_from_megatron(full_state: dict[str, torch.Tensor], spec) -> dict[str, torch.Tensor]:
    """Checkpoint-named tensors (what engines and `save_pretrained` folders hold) from whole Megatron tensors."""
    return dict(part for mname, kind, names in name_table(spec) for part in split(kind, names, full_state[mname]))
