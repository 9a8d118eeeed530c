"""RMSNorm exactly as HF glm5_next computes it: fp32 statistics, cast back, then the weight.

In training it is recomputed in backward from its bf16 input: kept, its fp32 copy of the
input and the normalised bf16 output cost 6 B per element, 3x the input, twice per layer."""
import torch
from torch.utils.checkpoint import checkpoint

from model.megatron.fused import fused
from model.megatron.parallel import mark_duplicated


@fused
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


class RMSNorm(torch.nn.Module):
    def __init__(self, width: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = mark_duplicated(torch.nn.Parameter(torch.ones(width, dtype=dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return checkpoint(rms_norm, x, self.weight, self.eps, use_reentrant=False)
        return rms_norm(x, self.weight, self.eps)
