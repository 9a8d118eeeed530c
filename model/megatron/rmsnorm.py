"""RMSNorm exactly as HF glm5_next computes it: fp32 statistics, cast back, then the weight.

In training it is recomputed in backward from its bf16 input: kept, its fp32 copy of the
input and the normalised bf16 output cost 6 B per element, 3x the input, twice per layer."""
import torch
from torch.utils.checkpoint import checkpoint

from model.megatron.parallel import mark_duplicated


class RMSNorm(torch.nn.Module):
    def __init__(self, width: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = mark_duplicated(torch.nn.Parameter(torch.ones(width, dtype=dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return checkpoint(self._norm, x, use_reentrant=False)
        return self._norm(x)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)
