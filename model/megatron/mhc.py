"""Manifold-constrained hyper-connections (mHC) as GLM-5.3-Flash uses them.

The residual is hc_mult streams per token. Before each sub-layer the streams are collapsed
with weights `pre`; after it, the output is expanded with `post` and added to the streams
mixed by `comb`, a Sinkhorn-normalised (doubly stochastic) matrix. The coefficient network
normalises the flattened streams with GLM's RMS norm, eps INSIDE the sqrt
(x * rsqrt(mean(x^2) + eps)); Megatron's fused mHC computes 1/(rms + eps), so it is not used.
All per token, so it runs on each rank's sequence shard; its weights are duplicated.
Shape legend: T tokens, N streams, D hidden.
"""
import torch

from model.megatron.fused import fused
from model.megatron.parallel import mark_duplicated
from model.megatron.spec import ModelSpec


def _matmul_fp32(a_TF: torch.Tensor, b_WF: torch.Tensor) -> torch.Tensor:
    """a @ b^T for bf16 a and b, accumulated and returned in fp32: exactly the fp32 product
    of the upcast operands (bf16 x bf16 is exact in fp32). CUDA has the kernel; elsewhere
    (and for fp32 / fp64 operands) the operands are upcast."""
    if a_TF.is_cuda and a_TF.dtype in (torch.bfloat16, torch.float16):
        return torch.mm(a_TF, b_WF.T, out_dtype=torch.float32)
    work = _work_dtype(a_TF)
    return a_TF.to(work) @ b_WF.to(work).T


def _work_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


@fused
def _mix_input_grad(grad_TF: torch.Tensor, flat_TF: torch.Tensor, shift_T: torch.Tensor) -> torch.Tensor:
    return (grad_TF - shift_T.unsqueeze(-1) * flat_TF.to(grad_TF.dtype)).to(flat_TF.dtype)


class NormedMix(torch.autograd.Function):
    """The coefficient network's raw outputs: rsqrt(mean(x^2) + eps) * (x @ fn^T), x the
    flattened streams. HF normalises x in fp32 and then multiplies; the per-token scale
    commutes with the matmul, so this takes the same product straight from the bf16
    streams: no fp32 copy of them is made in forward or kept for backward (a plain
    autograd graph keeps two, 8 B x N x D per token and hyper-connection, more than every
    other activation of the 4-layer slice together). Backward needs only x, which the
    residual path keeps anyway, and [T] / [T, W] values."""

    @staticmethod
    def forward(ctx, flat_TF: torch.Tensor, fn_WF: torch.Tensor, eps: float) -> torch.Tensor:
        sumsq_T = torch.linalg.vector_norm(flat_TF, dim=-1, dtype=_work_dtype(flat_TF)).square()
        rstd_T = torch.rsqrt(sumsq_T / flat_TF.shape[-1] + eps)
        raw_TW = _matmul_fp32(flat_TF, fn_WF)
        ctx.save_for_backward(flat_TF, fn_WF, rstd_T, raw_TW)
        return raw_TW * rstd_T.unsqueeze(-1)

    @staticmethod
    def backward(ctx, grad_TW: torch.Tensor):
        """With s = g * rstd: d fn = s^T x, dx = s fn - x * rstd^2 * sum(s * raw) / F."""
        flat_TF, fn_WF, rstd_T, raw_TW = ctx.saved_tensors
        scaled_TW = grad_TW * rstd_T.unsqueeze(-1)
        work = scaled_TW.dtype
        grad_fn = (scaled_TW.T @ flat_TF.to(work)).to(fn_WF.dtype) if ctx.needs_input_grad[1] else None
        shift_T = rstd_T.square() * (scaled_TW * raw_TW).sum(-1) / flat_TF.shape[-1]
        grad_flat = _mix_input_grad(scaled_TW @ fn_WF.to(work), flat_TF, shift_T)
        return grad_flat, grad_fn, None


@fused
def _coefficients(mix_TW, base_W, scale_3, streams: int, iters: int, eps: float):
    """(pre_TN, post_TN, comb_TNN) from the raw outputs: sigmoid gates and the
    Sinkhorn-normalised mixing matrix, all fp32 (one fused kernel on the GPU)."""
    n = streams
    pre_TN, post_TN, comb_TM = mix_TW.split([n, n, n * n], dim=-1)
    pre_b, post_b, comb_b = base_W.split([n, n, n * n])
    pre = torch.sigmoid(pre_TN * scale_3[0] + pre_b) + eps
    post = 2 * torch.sigmoid(post_TN * scale_3[1] + post_b)
    comb = torch.softmax((comb_TM * scale_3[2] + comb_b).view(-1, n, n), dim=-1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return pre, post, comb


@fused
def _collapse(pre_TN: torch.Tensor, streams_TND: torch.Tensor) -> torch.Tensor:
    """The sub-layer input: the streams weighted by `pre`, summed in fp32."""
    return (pre_TN.unsqueeze(-1) * streams_TND).sum(dim=1).to(streams_TND.dtype)


class HyperConnection(torch.nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        n = spec.hc_mult
        self.streams, self.iters, self.hc_eps, self.norm_eps = n, spec.hc_sinkhorn_iters, spec.hc_eps, spec.rms_norm_eps
        width = (2 + n) * n
        self.fn = mark_duplicated(torch.nn.Parameter(torch.zeros(width, n * spec.hidden_size, dtype=spec.dtype)))
        self.base = mark_duplicated(torch.nn.Parameter(torch.zeros(width, dtype=torch.float32)))
        self.scale = mark_duplicated(torch.nn.Parameter(torch.ones(3, dtype=torch.float32)))

    def forward(self, streams_TND: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(post_TN, comb_TNN, collapsed_TD): expansion and mixing weights, and the sub-layer input."""
        mix_TW = NormedMix.apply(streams_TND.flatten(1), self.fn, self.norm_eps)
        pre, post, comb = _coefficients(mix_TW, self.base, self.scale, self.streams, self.iters, self.hc_eps)
        return post, comb, _collapse(pre, streams_TND)


@fused
def hc_merge(post_TN: torch.Tensor, comb_TNN: torch.Tensor, out_TD: torch.Tensor,
             residual_TND: torch.Tensor) -> torch.Tensor:
    """New streams: expand the sub-layer output with `post`, add the `comb`-mixed residual
    (mixed[j] = sum_i comb[i, j] residual[i]). HF's batched 4 x 4 matmul per token runs as a
    slow 32 x 32-tile GEMM (1.25 ms a call on the 4-layer slice); this broadcast sum of the
    same bf16 operands, accumulated in fp32 and rounded once, fuses into one kernel."""
    dtype = residual_TND.dtype
    comb_TNN1 = comb_TNN.to(dtype).float().unsqueeze(-1)
    mixed_TND = (comb_TNN1 * residual_TND.float().unsqueeze(2)).sum(dim=1).to(dtype)
    return post_TN.to(dtype).unsqueeze(-1) * out_TD.unsqueeze(-2) + mixed_TND


def expand_streams(x_TD: torch.Tensor, streams: int) -> torch.Tensor:
    """Block entry: every stream starts as the embedding."""
    return x_TD.unsqueeze(1).expand(-1, streams, -1).contiguous()


def contract_streams(streams_TND: torch.Tensor) -> torch.Tensor:
    """Block exit: GLM takes the plain mean of the streams (no learned head)."""
    return streams_TND.mean(dim=1)
