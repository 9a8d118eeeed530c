"""Tensor-parallel linears and the sequence-parallel entry/exit of a sub-layer.

Convention (Megatron's sequence parallelism, the only TP mode with MoE): between sub-layers
each TP rank holds T/tp tokens. A sub-layer gathers its input once (`enter_tp`), runs every
projection on the full sequence with local weight shards, and reduce-scatters its output
(`exit_tp`). Inside, each rank's contribution to the input gradient is partial (its heads,
its intermediate slice); the reduce-scatter in `enter_tp`'s backward sums them. Weights kept
whole on every TP rank ("duplicated": norms, mHC, MLA down-projections, KDA f_a/g_a, router)
therefore also get partial gradients, marked `sequence_parallel` so Megatron's
finalize_model_grads sums them over TP. With tp = 1 every collective is the identity.

Shape legend: T tokens (whole packed sequence), Tl local tokens (T / tp), D hidden width.
"""
from typing import Literal

import torch
import torch.nn.functional as F
from megatron.core import parallel_state as ps
from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

from model.megatron.comm import gather_tokens, reduce_scatter_tokens

Mode = Literal["column", "row", "duplicated"]


def tp_size() -> int:
    return ps.get_tensor_model_parallel_world_size()


def tp_rank() -> int:
    return ps.get_tensor_model_parallel_rank()


def split_size(total: int, parts: int, what: str) -> int:
    """total / parts, or a ValueError naming the dimension that does not divide."""
    if total % parts:
        raise ValueError(f"{what}={total} does not divide by the parallel size {parts}")
    return total // parts


def enter_tp(x_TlD: torch.Tensor) -> torch.Tensor:
    """All-gather the sequence (backward: reduce-scatter, summing the ranks' partial grads)."""
    if tp_size() == 1:
        return x_TlD
    return gather_tokens(x_TlD, ps.get_tensor_model_parallel_group())


def exit_tp(partial_TD: torch.Tensor) -> torch.Tensor:
    """Sum the ranks' partial outputs and keep this rank's T/tp tokens."""
    if tp_size() == 1:
        return partial_TD
    return reduce_scatter_tokens(partial_TD, ps.get_tensor_model_parallel_group())


def mark_duplicated(param: torch.nn.Parameter) -> torch.nn.Parameter:
    """A weight every TP rank holds whole: its partial grads are summed over TP."""
    param.sequence_parallel = tp_size() > 1
    return param


class ShardedLinear(torch.nn.Module):
    """y = x W^T with W split by `mode`: column = output rows, row = input columns.

    `stride` > 1 means the output is `stride` stacked blocks each split separately
    (gate|up of a SwiGLU), which is what Megatron's partition_stride records.
    """

    def __init__(self, in_features: int, out_features: int, mode: Mode, dtype: torch.dtype,
                 parts: int | None = None, stride: int = 1):
        super().__init__()
        parts = tp_size() if parts is None else parts
        self.mode = mode
        out_local = split_size(out_features, parts, "out_features") if mode == "column" else out_features
        in_local = split_size(in_features, parts, "in_features") if mode == "row" else in_features
        self.weight = torch.nn.Parameter(torch.empty(out_local, in_local, dtype=dtype))
        if mode == "duplicated":
            mark_duplicated(self.weight)
        else:
            set_tensor_model_parallel_attributes(self.weight, parts > 1, 0 if mode == "column" else 1, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)
