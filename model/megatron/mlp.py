"""Clamped SwiGLU MLPs: the dense layers and the shared expert.

linear_fc1 stacks gate and up (each split over TP, partition stride 2), linear_fc2 is
row-parallel. The clamp is GLM's: gate <= limit, |up| <= limit (Megatron's
activation_func_clamp_value does the same).
Shape legend: T tokens, Tl local tokens, D hidden, F local intermediate width.
"""
import torch
import torch.nn.functional as F

from model.megatron.fused import fused
from model.megatron.parallel import ShardedLinear, enter_tp, exit_tp


def _clamp(gate_up_TF2: torch.Tensor, limit: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    gate, up = gate_up_TF2.chunk(2, dim=-1)
    if limit is None:
        return gate, up
    return gate.clamp(max=limit), up.clamp(min=-limit, max=limit)


@fused
def _swiglu(gate_up_TF2: torch.Tensor, limit: float | None) -> torch.Tensor:
    gate, up = _clamp(gate_up_TF2, limit)
    return F.silu(gate) * up


@fused
def _swiglu_grad(gate_up_TF2: torch.Tensor, grad_TF: torch.Tensor, limit: float | None) -> torch.Tensor:
    """d(out)/d(gate | up) from fc1's output: the clamps and the sigmoid redone in fp32."""
    work = torch.promote_types(gate_up_TF2.dtype, torch.float32)
    gate, up = _clamp(gate_up_TF2.to(work), limit)
    sig = torch.sigmoid(gate)
    grad = grad_TF.to(work)
    grad_gate = grad * up * sig * (1 + gate * (1 - sig))
    grad_up = grad * gate * sig
    if limit is not None:
        raw_gate, raw_up = gate_up_TF2.chunk(2, dim=-1)
        grad_gate = grad_gate * (raw_gate <= limit)
        grad_up = grad_up * (raw_up.abs() <= limit)
    return torch.cat([grad_gate, grad_up], dim=-1).to(gate_up_TF2.dtype)


class ClampedSwiGLU(torch.autograd.Function):
    """silu(min(gate, limit)) * clamp(up, -limit, limit), keeping only fc1's output for backward.

    Plain autograd keeps the clamped gate, the clamped up and silu(gate) as well: three more
    [tokens, F] tensors per MLP, and per routed assignment (x top-k) in a MoE layer.
    Backward redoes the clamps and the sigmoid, elementwise, from fc1's output."""

    @staticmethod
    def forward(ctx, gate_up_TF2: torch.Tensor, limit: float | None) -> torch.Tensor:
        ctx.save_for_backward(gate_up_TF2)
        ctx.limit = limit
        return _swiglu(gate_up_TF2, limit)

    @staticmethod
    def backward(ctx, grad_TF: torch.Tensor):
        (gate_up_TF2,) = ctx.saved_tensors
        return _swiglu_grad(gate_up_TF2, grad_TF, ctx.limit), None


def clamped_swiglu(gate_up_TF2: torch.Tensor, limit: float | None) -> torch.Tensor:
    return ClampedSwiGLU.apply(gate_up_TF2, limit)


class SwiGLUMLP(torch.nn.Module):
    def __init__(self, hidden: int, intermediate: int, limit: float | None, dtype: torch.dtype):
        super().__init__()
        self.limit = limit
        self.linear_fc1 = ShardedLinear(hidden, 2 * intermediate, "column", dtype, stride=2)
        self.linear_fc2 = ShardedLinear(intermediate, hidden, "row", dtype)

    def forward(self, x_TlD: torch.Tensor) -> torch.Tensor:
        return exit_tp(self.linear_fc2(clamped_swiglu(self.linear_fc1(enter_tp(x_TlD)), self.limit)))
