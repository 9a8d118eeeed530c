"""The collectives the model needs, as autograd functions that work on NCCL and gloo.

Megatron's own mappings allocate their outputs on the current CUDA device, which keeps
multi-rank CPU tests (gloo) from running the TP/EP code paths; these allocate like their
input. gloo has no reduce-scatter, so there it is an all-reduce plus taking this rank's
slice (same result, more traffic; only CPU tests take that path).
"""
import torch
import torch.distributed as dist


def _gather0(x: torch.Tensor, group) -> torch.Tensor:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=0)


def _reduce_scatter0(x: torch.Tensor, group) -> torch.Tensor:
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    if x.is_cuda:
        out = torch.empty((x.shape[0] // size, *x.shape[1:]), dtype=x.dtype, device=x.device)
        dist.reduce_scatter_tensor(out, x.contiguous(), group=group)
        return out
    total = x.clone()
    dist.all_reduce(total, group=group)
    return total.chunk(size, dim=0)[rank].contiguous()


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather0(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter0(grad, ctx.group), None


class _ReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _reduce_scatter0(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather0(grad, ctx.group), None


class _AllReduce(torch.autograd.Function):
    """Sum over the group; the backward is the identity (each rank's sum depends on its input)."""

    @staticmethod
    def forward(ctx, x, group):
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def gather_tokens(x: torch.Tensor, group) -> torch.Tensor:
    """All-gather along dim 0 (backward: reduce-scatter, summing the ranks' partial grads)."""
    return x if dist.get_world_size(group) == 1 else _Gather.apply(x, group)


def reduce_scatter_tokens(x: torch.Tensor, group) -> torch.Tensor:
    """Sum partial outputs over the group and keep this rank's slice of dim 0."""
    return x if dist.get_world_size(group) == 1 else _ReduceScatter.apply(x, group)


def all_reduce_sum(x: torch.Tensor, group) -> torch.Tensor:
    return x if dist.get_world_size(group) == 1 else _AllReduce.apply(x, group)


def gather_last_dim(x: torch.Tensor, group) -> torch.Tensor:
    """All-gather along the last dim, no gradient (full vocabulary for tests)."""
    if dist.get_world_size(group) == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.detach().contiguous(), group=group)
    return torch.cat(parts, dim=-1)
