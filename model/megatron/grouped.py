"""A linear layer per local expert, applied to tokens already sorted by expert.

On CUDA one torch._grouped_mm call runs every expert; elsewhere a loop does (CPU tests).
Expert weights are sharded over EP (which experts) and ETP (`etp_dim` of each weight) and
replicated over the expert-data-parallel group, so they carry `allreduce = False`, which
tells Megatron's DDP to reduce their grads over that group instead of the dense DP group.
Shape legend: A assignments sorted by expert, G local experts, I input, O output width.
"""
import torch
import torch.nn.functional as F
from megatron.core import parallel_state as ps
from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

ALIGN = 8
"""torch._grouped_mm needs 16-byte strides: small LoRA ranks are zero-padded to 8 columns."""


class GroupedMM(torch.autograd.Function):
    """torch._grouped_mm(x, weight^T) with the weight grad formed in the weight's own
    [G, O, I] layout. Through autograd it comes out [G, I, O] and transposed, and the grad
    accumulator copies it into the parameter's layout: a copy of every expert weight
    (0.7 ms per expert matrix and layer on the 4-layer slice, 8.6 ms a step)."""

    @staticmethod
    def forward(ctx, x_AI: torch.Tensor, weight_GOI: torch.Tensor, offsets_G: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x_AI, weight_GOI, offsets_G)
        return torch._grouped_mm(x_AI, weight_GOI.transpose(-2, -1), offs=offsets_G)

    @staticmethod
    def backward(ctx, grad_AO: torch.Tensor):
        x_AI, weight_GOI, offsets_G = ctx.saved_tensors
        grad_AO = grad_AO.contiguous()
        grad_x = torch._grouped_mm(grad_AO, weight_GOI, offs=offsets_G) if ctx.needs_input_grad[0] else None
        grad_w = torch._grouped_mm(grad_AO.T, x_AI, offs=offsets_G) if ctx.needs_input_grad[1] else None
        return grad_x, grad_w, None


def grouped_matmul(x_AI: torch.Tensor, weight_GOI: torch.Tensor, counts_G: torch.Tensor) -> torch.Tensor:
    """Row block g of x (counts_G[g] rows) times weight[g]^T."""
    if x_AI.is_cuda:
        out_f, in_f = weight_GOI.shape[1:]
        pad_out, pad_in = -out_f % ALIGN, -in_f % ALIGN
        if pad_out or pad_in:
            x_AI = F.pad(x_AI, (0, pad_in))
            weight_GOI = F.pad(weight_GOI, (0, pad_in, 0, pad_out))
        offsets_G = torch.cumsum(counts_G, 0, dtype=torch.int32)
        return GroupedMM.apply(x_AI, weight_GOI, offsets_G)[:, :out_f]
    blocks = torch.split(x_AI, counts_G.tolist())
    return torch.cat([block @ weight_GOI[g].T for g, block in enumerate(blocks)])


class GroupedLinear(torch.nn.Module):
    def __init__(self, experts: int, in_features: int, out_features: int, dtype: torch.dtype, etp_dim: int,
                 stride: int = 1):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(experts, out_features, in_features, dtype=dtype))
        self.weight.allreduce = False
        set_tensor_model_parallel_attributes(self.weight, ps.get_expert_tensor_parallel_world_size() > 1, etp_dim, stride)

    def forward(self, x_AI: torch.Tensor, counts_G: torch.Tensor) -> torch.Tensor:
        return grouped_matmul(x_AI, self.weight, counts_G)
