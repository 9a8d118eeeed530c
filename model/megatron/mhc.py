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
import torch.nn.functional as F

from model.megatron.fused import fused
from model.megatron.parallel import mark_duplicated
from model.megatron.rmsnorm import rms_input_grad
from model.megatron.spec import ModelSpec


@fused
def _norm_input_grad(grad_TF: torch.Tensor, flat_TF: torch.Tensor, rstd_T1: torch.Tensor) -> torch.Tensor:
    return rms_input_grad(grad_TF, flat_TF.to(grad_TF.dtype) * rstd_T1, rstd_T1).to(flat_TF.dtype)


class NormedMix(torch.autograd.Function):
    """The coefficient network's raw outputs: the flattened streams RMS-normalised in fp32,
    then an fp32 matmul with `fn`, in HF's exact op order (on the random-init 4-layer
    slice, taking the same product as rstd * (x @ fn^T) straight from bf16 moved the
    per-token KL to HF from 0.0045 to 0.0150: mHC's outputs feed every router and the
    DSA indexer, where a last-bit change flips top-k choices). Plain autograd would keep
    the two fp32 copies of the streams (8 B x N x D per token and hyper-connection, more
    than every other activation of the 4-layer slice together); this keeps the bf16
    streams (held by the residual path anyway) and rstd, and normalises again in backward."""

    @staticmethod
    def forward(ctx, flat_TF: torch.Tensor, fn_WF: torch.Tensor, eps: float) -> torch.Tensor:
        work = torch.promote_types(flat_TF.dtype, torch.float32)
        x_TF = flat_TF.to(work)
        rstd_T1 = torch.rsqrt(x_TF.square().mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(flat_TF, fn_WF, rstd_T1)
        return F.linear(x_TF * rstd_T1, fn_WF.to(work))

    @staticmethod
    def backward(ctx, grad_TW: torch.Tensor):
        flat_TF, fn_WF, rstd_T1 = ctx.saved_tensors
        grad_fn = None
        if ctx.needs_input_grad[1]:
            grad_fn = (grad_TW.T @ (flat_TF.to(grad_TW.dtype) * rstd_T1)).to(fn_WF.dtype)
        grad_flat = _norm_input_grad(grad_TW @ fn_WF.to(grad_TW.dtype), flat_TF, rstd_T1)
        return grad_flat, grad_fn, None


def _coefficients(mix_TW, base_W, scale_3, streams: int, iters: int, eps: float):
    """(pre_TN, post_TN, comb_TNN) from the raw outputs: sigmoid gates and the
    Sinkhorn-normalised mixing matrix, all fp32. Eager in HF's op order: fused, its
    reordered fp32 sums moved the 4-layer slice's KL to HF from 0.0014 to 0.0052."""
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
def _hc_merge_grad(grad_TND, post_TN, comb_TNN, out_TD, residual_TND):
    """Grads of hc_merge for (post, comb, out, residual), fp32 sums rounded once."""
    dtype, g_TND = residual_TND.dtype, grad_TND.float()
    post_TN1, comb_TNN1 = post_TN.to(dtype).float().unsqueeze(-1), comb_TNN.to(dtype).float().unsqueeze(-1)
    grad_out = (post_TN1 * g_TND).sum(1).to(dtype)
    grad_residual = (comb_TNN1 * g_TND.unsqueeze(1)).sum(2).to(dtype)
    grad_post = (g_TND * out_TD.float().unsqueeze(1)).sum(-1)
    grad_comb = (residual_TND.float().unsqueeze(2) * g_TND.unsqueeze(1)).sum(-1)
    return grad_post, grad_comb, grad_out, grad_residual


class HcMerge(torch.autograd.Function):
    """New streams: expand the sub-layer output with `post`, add the `comb`-mixed residual
    (mixed[j] = sum_i comb[i, j] residual[i]). The forward is HF's batched 4 x 4 matmul
    per token, bitwise: the same sum fused into one kernel (fp32, rounded once) moved the
    4-layer slice's KL to HF from 0.0014 to 0.0046. The backward is one fused chain, where
    autograd ran two batched matmuls on 32 x 32 tiles (1.25 ms each on that slice)."""

    @staticmethod
    def forward(ctx, post_TN, comb_TNN, out_TD, residual_TND):
        ctx.save_for_backward(post_TN, comb_TNN, out_TD, residual_TND)
        dtype = residual_TND.dtype
        mixed_TND = torch.matmul(comb_TNN.to(dtype).transpose(-1, -2), residual_TND)
        return post_TN.to(dtype).unsqueeze(-1) * out_TD.unsqueeze(-2) + mixed_TND

    @staticmethod
    def backward(ctx, grad_TND):
        return _hc_merge_grad(grad_TND, *ctx.saved_tensors)


def hc_merge(post_TN: torch.Tensor, comb_TNN: torch.Tensor, out_TD: torch.Tensor,
             residual_TND: torch.Tensor) -> torch.Tensor:
    return HcMerge.apply(post_TN, comb_TNN, out_TD, residual_TND)


def expand_streams(x_TD: torch.Tensor, streams: int) -> torch.Tensor:
    """Block entry: every stream starts as the embedding."""
    return x_TD.unsqueeze(1).expand(-1, streams, -1).contiguous()


def contract_streams(streams_TND: torch.Tensor) -> torch.Tensor:
    """Block exit: GLM takes the plain mean of the streams (no learned head)."""
    return streams_TND.mean(dim=1)
