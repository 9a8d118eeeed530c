"""Where each rank's tensors sit in a checkpoint's whole tensors (checkpoint.py's layout).

A rank's parameter is a slice of the whole tensor described by the attributes it
carries, read as model/megatron/shards.py reads them (partition_dim / partition_stride over
TP or ETP, experts split on dim 0 over EP when allreduce=False). A partition_stride > 1
(fc1's gate|up, conv1d's q|k|v) makes the slice several blocks of the whole tensor: each
block is its own chunk at its own global offset, so any mesh reads back exactly its rows.
The distributed optimizer holds, per parameter, a contiguous range of the flattened local
slice; that range is cut into at most 2*ndim-1 boxes (partial row, whole rows, partial
row) and each box into the parameter's blocks, all chunks of the same global tensor. Only
one rank writes each chunk: DP replicas of weights and CPU AdamW moments write on data-
parallel rank 0, TP/ETP-duplicated tensors on model-parallel rank 0; distributed-optimizer
ranges are disjoint over DP already.
"""
from itertools import product
from math import prod

import torch
from megatron.core import parallel_state as ps
from megatron.core.dist_checkpointing.mapping import ShardedTensor
from megatron.core.dist_checkpointing.strategies.checkpointable import (
    CheckpointableShardedTensor,
    LocalShardsContainer,
)

from model.megatron.shards import shard_splits


def _chunk_ranges(lo: int, n: int, count: int) -> list[tuple[int, int]]:
    """torch.chunk's pieces of [lo, lo + n): ceil-sized, possibly fewer than `count`."""
    step = -(-n // count)
    return [(lo + i, min(step, n - i)) for i in range(0, n, step)]


def _dim_segments(extent: int, splits: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """[(local_lo, global_lo, length)] of one dimension after the (stride, rank, size) splits
    shards.shard_of applies to it, outermost first."""
    segments = [(0, 0, extent)]
    for stride, rank, size in splits:
        current = sum(n for _, _, n in segments)
        taken, local = [], 0
        for lo, n in _chunk_ranges(0, current, stride):
            parts = _chunk_ranges(lo, n, size)
            if rank >= len(parts):
                continue
            c_lo, c_n = parts[rank]
            for s_local, s_global, s_n in segments:  # map [c_lo, c_lo + c_n) through the current segments
                a, b = max(c_lo, s_local), min(c_lo + c_n, s_local + s_n)
                if a < b:
                    taken.append((local + a - c_lo, s_global + a - s_local, b - a))
            local += c_n
        segments = taken
    return segments


def layout(param: torch.Tensor) -> tuple[tuple[int, ...], list[tuple[tuple[slice, ...], tuple[int, ...]]]]:
    """(whole shape, [(local slices, global offset)]): the blocks of the whole tensor this
    rank's `param` holds, one per combination of its dimensions' contiguous runs."""
    shape = list(param.shape)
    per_dim = {d: [] for d in range(param.dim())}
    for dim, stride, rank, size, _ in shard_splits(param):
        per_dim[dim].append((stride, rank, size))
        shape[dim] *= size
    segments = [_dim_segments(shape[d], per_dim[d]) for d in range(param.dim())]
    blocks = []
    for combo in product(*segments):
        blocks.append((tuple(slice(lo, lo + n) for lo, _, n in combo), tuple(g for _, g, _ in combo)))
    return tuple(shape), blocks


def flat_boxes(shape: tuple[int, ...], start: int, end: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """[(offset, size)] boxes of a tensor of `shape` covering flat positions [start, end),
    in order; each box is contiguous in memory (leading single indices, one range, then
    whole trailing dims)."""
    if start >= end:
        return []
    if len(shape) <= 1:
        return [((start,), (end - start,))] if shape else [((), ())]
    inner = prod(shape[1:])
    r_start, o_start = divmod(start, inner)
    r_end, o_end = divmod(end, inner)
    if r_start == r_end:
        return [((r_start, *off), (1, *size)) for off, size in flat_boxes(shape[1:], o_start, o_end)]
    boxes = []
    if o_start:
        boxes += [((r_start, *off), (1, *size)) for off, size in flat_boxes(shape[1:], o_start, inner)]
        r_start += 1
    if r_end > r_start:
        boxes.append(((r_start,) + (0,) * (len(shape) - 1), (r_end - r_start, *shape[1:])))
    if o_end:
        boxes += [((r_end, *off), (1, *size)) for off, size in flat_boxes(shape[1:], 0, o_end)]
    return boxes


def _ravel(offset: tuple[int, ...], shape: tuple[int, ...]) -> int:
    index = 0
    for o, n in zip(offset, shape, strict=True):
        index = index * n + o
    return index


def flat_chunks(flat: torch.Tensor, start: int, local_shape: tuple[int, ...],
                blocks) -> list[tuple[torch.Tensor, tuple[int, ...]]]:
    """[(view of `flat`, global offset)]: `flat` holds flat positions [start, start + numel)
    of a local slice of `local_shape` whose blocks are `blocks` (layout())."""
    out = []
    for offset, size in flat_boxes(local_shape, start, start + flat.numel()):
        first = _ravel(offset, local_shape) - start
        box = flat[first:first + prod(size)].view(size)
        for local, global_offset in blocks:
            lo = [max(o, s.start) for o, s in zip(offset, local, strict=True)]
            hi = [min(o + n, s.stop) for o, n, s in zip(offset, size, local, strict=True)]
            if all(a < b for a, b in zip(lo, hi, strict=True)):
                view = box[tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, offset, strict=True))]
                out.append((view, tuple(g + a - s.start for g, a, s in zip(global_offset, lo, local, strict=True))))
    return out


def model_parallel_rank(param: torch.Tensor) -> int:
    """This rank's index among the ranks holding the same slice as it over TP (ETP for experts)."""
    if getattr(param, "tensor_model_parallel", False):
        return 0
    expert = getattr(param, "allreduce", True) is False
    return ps.get_expert_tensor_parallel_rank() if expert else ps.get_tensor_model_parallel_rank()


def data_parallel_rank(param: torch.Tensor) -> int:
    expert = getattr(param, "allreduce", True) is False
    return ps.get_expert_data_parallel_rank() if expert else ps.get_data_parallel_rank()


class Chunks:
    """key -> [ShardedTensor] of this rank, and the whole shape and dtype of each key."""

    def __init__(self):
        self.by_key: dict[str, list[ShardedTensor]] = {}

    def add(self, key: str, data: torch.Tensor, global_shape: tuple[int, ...], offset: tuple[int, ...]) -> None:
        # axis_fragmentations=None: blocks of a strided split and optimizer boxes form no regular grid
        self.by_key.setdefault(key, []).append(ShardedTensor(key, data, data.dtype, tuple(data.shape),
                                                             tuple(global_shape), tuple(offset), None))

    def add_param(self, key: str, local: torch.Tensor, param: torch.Tensor) -> None:
        shape, blocks = layout(param)
        for slices, offset in blocks:
            self.add(key, local[slices], shape, offset)

    def add_flat(self, key: str, flat: torch.Tensor, start: int, param: torch.Tensor) -> None:
        shape, blocks = layout(param)
        for view, offset in flat_chunks(flat, start, tuple(param.shape), blocks):
            self.add(key, view, shape, offset)

    def staged(self) -> "Chunks":
        """A copy in host memory (what an async write reads while training goes on)."""
        out = Chunks()
        for key, tensors in self.by_key.items():
            for t in tensors:
                out.add(key, torch.empty(t.local_shape, dtype=t.dtype).copy_(t.data), t.global_shape, t.global_offset)
        return out

    def dcp_state(self) -> dict:
        state = {}
        for key, tensors in self.by_key.items():
            wrapped = [CheckpointableShardedTensor.from_sh_ten(t) for t in tensors]
            state[key] = wrapped[0] if len(wrapped) == 1 else LocalShardsContainer(wrapped)
        return state

    def nbytes(self) -> int:
        return sum(t.data.numel() * t.data.element_size() for ts in self.by_key.values() for t in ts)

