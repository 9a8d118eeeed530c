"""Per-expert checkpoint tensors written straight into a fused expert parameter.

transformers assembles glm5_next's `mlp.experts.gate_up_proj` ([E, 2I, H]) from the
checkpoint's per-expert gate_proj/up_proj with MergeModulelist(dim=0) then Concatenate(dim=1),
and `down_proj` with MergeModulelist(dim=0) alone. Run as written during a weight sync, that
holds a layer's pieces until the last expert arrives, stacks them, then concatenates: three
copies of the tensor beside the parameter it lands in. On the 4-layer slice's H200 that was
27 GiB (9 GiB each) on top of the engine's 44.3 GiB of weights, and step 1's sync ran out of
memory in that torch.cat. The same rules, applied in place: piece (expert e, source i) is
row block i of parameter[e], copied as it arrives; nothing is kept.

Only these two operation lists are taken over (read off the model's own conversion rules);
any other converter keeps transformers' path (names.py ModelNameAssembler).
"""
import re
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Slot:
    """Where one checkpoint tensor lands: rows [start, start + rows) of `target`[expert]."""

    target: str
    expert: int
    start: int
    rows: int


def _stacks_experts(converter) -> bool:
    """Whether the converter stacks experts (MergeModulelist over dim 0), then at most joins
    the sources along their rows (Concatenate(dim=1) of the stacks): the layout Slot describes."""
    ops = [(type(op).__name__, getattr(op, "dim", None)) for op in converter.operations]
    return ops in ([("MergeModulelist", 0)], [("MergeModulelist", 0), ("Concatenate", 1)])


def _pattern_regex(pattern: str) -> re.Pattern:
    return re.compile(re.escape(pattern).replace(r"\*", r"(\d+)"))


def expert_slots(converters, sources: dict[str, set[str]], expected: dict[str, tuple]) -> dict[str, Slot]:
    """{checkpoint name: Slot} for every checkpoint tensor an in-place converter builds;
    `sources`: {in-memory name: its checkpoint names}, `expected`: {checkpoint name: shape}."""
    slots = {}
    for converter in converters:
        if not _stacks_experts(converter):
            continue
        regexes = [_pattern_regex(p) for p in converter.source_patterns]
        for target, names in sources.items():
            for name in names:
                found = [(i, m) for i, r in enumerate(regexes) if (m := r.search(name))]
                if len(found) != 1:
                    continue
                index, match = found[0]
                rows = expected[name][0]
                slots[name] = Slot(target, int(match.group(1)), index * rows, rows)
    return slots


def copy_in_place(parameters: dict[str, torch.Tensor], slot: Slot, tensor: torch.Tensor) -> None:
    """tensor -> its rows of the fused parameter (a copy: the tensor may be a view of the
    trainer's CUDA IPC buffer, which is reused once this load returns)."""
    with torch.no_grad():
        parameters[slot.target][slot.expert].narrow(0, slot.start, slot.rows).copy_(tensor)
