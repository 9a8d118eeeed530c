"""RMSNorm exactly as HF glm5_next computes it: fp32 statistics, cast back, then the weight.

The forward is HF's eager ops (fused, its reordered fp32 mean moved the 4-layer slice's
KL to HF from 0.0014 to 0.0045: norms feed every router and the DSA indexer). Backward
keeps only the bf16 input and the per-row rstd (plain autograd keeps an fp32 copy of the
input and the normalised bf16 output too, 6 B per element, 3x the input, twice per
layer) and is one fused chain on the GPU, with nothing recomputed.
"""
import torch

from model.megatron.fused import fused
from model.megatron.parallel import mark_duplicated


def rms_input_grad(grad_n: torch.Tensor, normed: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    """d(x * rstd(x)) / dx applied to grad_n: rstd * (g - y * mean(g * y)), y = x * rstd.
    Plain ops, so it fuses into whichever compiled backward calls it (here and mHC's)."""
    return rstd * (grad_n - normed * (grad_n * normed).mean(-1, keepdim=True))


@fused
def _rms_norm_grad(grad, x, weight, rstd):
    """(d x, d weight): y = weight * bf16(x * rstd), so d weight sums grad * bf16(x * rstd)."""
    x32 = x.float()
    normed = x32 * rstd
    grad_w = (grad.float() * normed.to(x.dtype).float()).flatten(0, -2).sum(0).to(weight.dtype)
    grad_n = grad.float() * weight.float()
    return rms_input_grad(grad_n, normed, rstd).to(x.dtype), grad_w


class RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x32 = x.float()
        rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return weight * (x32 * rstd).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad_x, grad_w = _rms_norm_grad(grad, *ctx.saved_tensors)
        return grad_x, grad_w if ctx.needs_input_grad[1] else None, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return RMSNormFn.apply(x, weight, eps)


class RMSNorm(torch.nn.Module):
    def __init__(self, width: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = mark_duplicated(torch.nn.Parameter(torch.ones(width, dtype=dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)
