"""Load checkpoint weights into a (sharded) GlmModel and export checkpoint-named weights.

Loading reads, per parameter, only this rank's slice of the tensors the name table
composes it from (reader.py): host memory stays at one slice plus the rank's shard.
Export gathers every shard (a collective: call it on every rank); adapters are merged into
the exported weights when the model carries LoRA (model.megatron.lora), so what leaves
is always a plain checkpoint-named state dict. `hf_stream` yields it one tensor at a time,
which is how weight sync and `launcher export` send it (never the whole model at once).
"""
from collections.abc import Iterator

import torch

from model.megatron.mapping import split
from model.megatron.reader import FLOAT_DTYPES, CheckpointFormatError, SafetensorsFolder, TensorDict
from model.megatron.shards import gather_full, shard_index, shard_splits, whole_shape
from model.names import CONV, EXPERTS, ONE, name_table, part_names


def base_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers that the checkpoint has (LoRA adapters excluded)."""
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    return {name: t for name, t in tensors.items() if ".lora_" not in name}


def _part_shape(source, kind: str, name: str) -> tuple[int, ...]:
    shape = source.shape(name)
    if kind == CONV:
        if len(shape) != 3 or shape[1] != 1:
            raise CheckpointFormatError(f"{_where(source, name)}: tensor {name} has shape {list(shape)}, "
                                        "a short-conv weight is [channels, 1, kernel]")
        return (shape[0], shape[2])
    return shape


def _where(source, name: str) -> str:
    return source.file_of(name) if hasattr(source, "file_of") else "state dict"


def _check_row(source, mname: str, kind: str, names: tuple[str, ...], want: tuple[int, ...], experts: int) -> None:
    """Every part exists, is floating point, and together they make the shape the model needs."""
    parts = part_names(kind, names, experts)
    for name in parts:
        if source.dtype(name) not in FLOAT_DTYPES:
            raise CheckpointFormatError(f"{_where(source, name)}: tensor {name} has dtype {source.dtype(name)}; "
                                        "weights must be floating point")
    shapes = [_part_shape(source, kind, n) for n in parts]
    per_expert = len(names) if kind == EXPERTS else len(parts)
    rows = sum(s[0] for s in shapes[:per_expert])
    inner = want[1:] if kind != EXPERTS else want[2:]
    ok = all(s[1:] == inner for s in shapes) and (rows == (want[1] if kind == EXPERTS else want[0]))
    if kind == EXPERTS:
        ok = ok and want[0] == experts and all(s == shapes[i % per_expert] for i, s in enumerate(shapes))
    if not ok:
        found = ", ".join(f"{n} {list(s)} in {_where(source, n)}" for n, s in list(zip(parts, shapes, strict=True))[:4])
        raise CheckpointFormatError(f"checkpoint tensors for {mname} do not make its shape {list(want)}: {found}"
                                    f"{' ...' if len(parts) > 4 else ''}; is the checkpoint for another architecture?")


def _copy_rows(out: torch.Tensor, source, kind: str, names: list[str], index: list[list[int]]) -> None:
    """Copy the selected rows (index[0]) of the row concatenation of `names` into `out`,
    reading only those rows, each piece straight into its place (no cat: one copy per byte)."""
    offset, filled = 0, 0
    for name in names:
        shape = _part_shape(source, kind, name)
        rows = [i - offset for i in index[0] if offset <= i < offset + shape[0]]
        offset += shape[0]
        if not rows:
            continue
        if kind == CONV:
            piece = source.read(name, [rows, [0], *index[1:]]).squeeze(1)
        else:
            piece = source.read(name, [rows, *index[1:]])
        out[filled:filled + len(rows)].copy_(piece)
        filled += len(rows)


def copy_shard(param: torch.Tensor, source, kind: str, names: tuple[str, ...], index: list[list[int]]) -> None:
    """Fill this rank's slice of one Megatron tensor from its checkpoint tensors, in place:
    host memory holds one piece at a time beyond the parameter itself."""
    if kind == ONE:
        param.copy_(source.read(names[0], index))
    elif kind == EXPERTS:
        for local, expert in enumerate(index[0]):
            _copy_rows(param[local], source, kind, [n.format(e=expert) for n in names], index[1:])
    else:
        _copy_rows(param, source, kind, list(names), index)


def load_weights(model: torch.nn.Module, source, on_progress=None) -> None:
    """Copy checkpoint weights (a SafetensorsFolder or TensorDict) into this rank's shards.
    on_progress(bytes loaded, bytes in all) after each tensor: the start-up progress line."""
    tensors = base_tensors(model)
    table = name_table(model.spec)
    unmatched = sorted(set(tensors) ^ {row[0] for row in table})
    if unmatched:
        raise KeyError(f"the name table and the model disagree on {unmatched[:5]}")
    experts = model.spec.n_routed_experts
    total, done = sum(t.numel() * t.element_size() for t in tensors.values()), 0
    try:
        for mname, kind, names in table:
            param = tensors[mname]
            _check_row(source, mname, kind, names, whole_shape(param), experts)
            with torch.no_grad():
                copy_shard(param, source, kind, names, shard_index(param))
            done += param.numel() * param.element_size()
            if on_progress is not None:
                on_progress(done, total)
    finally:
        source.close()


def load_model_folder(model: torch.nn.Module, folder: str, on_progress=None) -> None:
    load_weights(model, SafetensorsFolder(folder), on_progress)


def load_hf_state(model: torch.nn.Module, hf_state: dict[str, torch.Tensor]) -> None:
    """load_weights from checkpoint-named tensors in memory."""
    load_weights(model, TensorDict(hf_state))


def hf_stream(model: torch.nn.Module, merged: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Whole checkpoint-named tensors in the name table's order (layer by layer), LoRA merged
    in when `merged`. Each Megatron tensor is gathered when reached: a collective, so every
    rank iterates this in lockstep."""
    tensors = base_tensors(model)
    owners = {f"{name}.weight": module for name, module in model.named_modules()
              if merged and hasattr(module, "merged_weight")}
    for mname, kind, names in name_table(model.spec):
        owner = owners.get(mname)
        if owner is not None and hasattr(owner, "merged_expert") and not shard_splits_over_ranks(tensors[mname]):
            yield from _merged_experts(owner, names)
            continue
        with torch.no_grad():  # not around the yields: grad mode stays the caller's between items
            full = gather_full(tensors[mname], owner.merged_weight() if owner is not None else None)
        yield from split(kind, names, full)
        del full


def shard_splits_over_ranks(param: torch.Tensor) -> bool:
    """Whether some rank other than this one holds part of `param` (it must be gathered whole)."""
    return any(size > 1 for *_, size, _ in shard_splits(param))


def _merged_experts(owner, names: tuple[str, ...]) -> Iterator[tuple[str, torch.Tensor]]:
    """A whole expert stack's checkpoint tensors, LoRA merged one expert at a time (split's
    order and values): the stack's merged copy (9 GiB of fc1 on the 4-layer slice) stayed
    beside the engine's assembly in a colocated sync and ran the H200 out of memory."""
    for expert in range(owner.weight.shape[0]):
        with torch.no_grad():
            merged = owner.merged_expert(expert)
        for name, part in zip(names, merged.chunk(len(names), dim=0), strict=True):
            yield name.format(e=expert), part
        del merged


def export_hf_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Whole checkpoint-named tensors on every rank; LoRA adapters merged in."""
    return dict(hf_stream(model, merged=True))
