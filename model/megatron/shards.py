"""Split whole tensors into this rank's shard and gather shards back, reading only the
attributes each parameter carries (Megatron's partition_dim / partition_stride /
tensor_model_parallel, and allreduce=False for experts). So the mapping table never
needs to know TP, EP or ETP sizes, and any mesh loads and exports the same checkpoint.
"""
import torch
import torch.distributed as dist
from megatron.core import parallel_state as ps


def shard_splits(param: torch.Tensor) -> list[tuple[int, int, int, int, object]]:
    """[(dim, stride, rank, size, group)] splits applied to the whole tensor, outermost first."""
    if getattr(param, "allreduce", True) is False:
        splits = [(0, 1, ps.get_expert_model_parallel_rank(), ps.get_expert_model_parallel_world_size(),
                   ps.get_expert_model_parallel_group())]
        if getattr(param, "tensor_model_parallel", False):
            splits.append((param.partition_dim, param.partition_stride, ps.get_expert_tensor_parallel_rank(),
                           ps.get_expert_tensor_parallel_world_size(), ps.get_expert_tensor_parallel_group()))
        return splits
    if getattr(param, "tensor_model_parallel", False):
        return [(param.partition_dim, param.partition_stride, ps.get_tensor_model_parallel_rank(),
                 ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_group())]
    return []


def _take(full: torch.Tensor, dim: int, stride: int, rank: int, size: int) -> torch.Tensor:
    blocks = full.chunk(stride, dim=dim)
    return torch.cat([block.chunk(size, dim=dim)[rank] for block in blocks], dim=dim)


def _join(parts: list[torch.Tensor], dim: int, stride: int) -> torch.Tensor:
    per_rank_blocks = [part.chunk(stride, dim=dim) for part in parts]
    return torch.cat([torch.cat([blocks[b] for blocks in per_rank_blocks], dim=dim) for b in range(stride)], dim=dim)


def _chunks(indices: list[int], count: int) -> list[list[int]]:
    """torch.chunk's split of a sequence (ceil-sized pieces), so index selection and
    tensor slicing agree on every uneven size."""
    step = -(-len(indices) // count)
    return [indices[i:i + step] for i in range(0, len(indices), step)]


def whole_shape(param: torch.Tensor) -> tuple[int, ...]:
    """The shape of the whole (unsharded) tensor `param` is a slice of."""
    shape = list(param.shape)
    for dim, _, _, size, _ in shard_splits(param):
        shape[dim] *= size
    return tuple(shape)


def shard_index(param: torch.Tensor) -> list[list[int]]:
    """Per dimension, the indices of the whole tensor this rank's `param` holds, in order:
    what a reader needs to fetch only this rank's slice from a checkpoint."""
    index = [list(range(n)) for n in whole_shape(param)]
    for dim, stride, rank, size, _ in shard_splits(param):
        index[dim] = [i for block in _chunks(index[dim], stride) for i in _chunks(block, size)[rank]]
    return index


def shard_of(full: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """This rank's slice of `full` for `param` (same shape as param)."""
    for dim, stride, rank, size, _ in shard_splits(param):
        full = _take(full, dim, stride, rank, size)
    return full


def gather_full(param: torch.Tensor, local: torch.Tensor | None = None) -> torch.Tensor:
    """The whole tensor from every rank's shard (a collective over the param's groups).

    `local` replaces the param's own data (a LoRA-merged weight) but keeps its layout.
    """
    tensor = (param if local is None else local).detach()
    for dim, stride, _, size, group in reversed(shard_splits(param)):
        if size > 1:
            parts = [torch.empty_like(tensor) for _ in range(size)]
            dist.all_gather(parts, tensor.contiguous(), group=group)
            tensor = _join(parts, dim, stride)
    return tensor
