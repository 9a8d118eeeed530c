"""RMSNorm exactly as HF glm5_next computes it: fp32 statistics, cast back, then the weight."""
import torch

from model.megatron.parallel import mark_duplicated


class RMSNorm(torch.nn.Module):
    def __init__(self, width: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = mark_duplicated(torch.nn.Parameter(torch.ones(width, dtype=dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)
