"""Clamped SwiGLU MLPs: the dense layers and the shared expert.

linear_fc1 stacks gate and up (each split over TP, partition stride 2), linear_fc2 is
row-parallel. The clamp is GLM's: gate <= limit, |up| <= limit (Megatron's
activation_func_clamp_value does the same).
Shape legend: T tokens, Tl local tokens, D hidden, F local intermediate width.
"""
import torch
import torch.nn.functional as F

from model.megatron.parallel import ShardedLinear, enter_tp, exit_tp


def clamped_swiglu(gate_up_TF2: torch.Tensor, limit: float | None) -> torch.Tensor:
    gate, up = gate_up_TF2.chunk(2, dim=-1)
    if limit is not None:
        gate = gate.clamp(max=limit)
        up = up.clamp(min=-limit, max=limit)
    return F.silu(gate) * up


class SwiGLUMLP(torch.nn.Module):
    def __init__(self, hidden: int, intermediate: int, limit: float | None, dtype: torch.dtype):
        super().__init__()
        self.limit = limit
        self.linear_fc1 = ShardedLinear(hidden, 2 * intermediate, "column", dtype, stride=2)
        self.linear_fc2 = ShardedLinear(intermediate, hidden, "row", dtype)

    def forward(self, x_TlD: torch.Tensor) -> torch.Tensor:
        return exit_tp(self.linear_fc2(clamped_swiglu(self.linear_fc1(enter_tp(x_TlD)), self.limit)))
