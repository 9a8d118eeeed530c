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
from torch.utils.checkpoint import checkpoint

from model.megatron.parallel import mark_duplicated
from model.megatron.spec import ModelSpec


class HyperConnection(torch.nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        n = spec.hc_mult
        self.streams, self.iters, self.hc_eps, self.norm_eps = n, spec.hc_sinkhorn_iters, spec.hc_eps, spec.rms_norm_eps
        width = (2 + n) * n
        self.fn = mark_duplicated(torch.nn.Parameter(torch.zeros(width, n * spec.hidden_size, dtype=spec.dtype)))
        self.base = mark_duplicated(torch.nn.Parameter(torch.zeros(width, dtype=torch.float32)))
        self.scale = mark_duplicated(torch.nn.Parameter(torch.ones(3, dtype=torch.float32)))

    def _sinkhorn(self, comb_TNN: torch.Tensor) -> torch.Tensor:
        comb_TNN = comb_TNN / (comb_TNN.sum(-2, keepdim=True) + self.hc_eps)
        for _ in range(self.iters - 1):
            comb_TNN = comb_TNN / (comb_TNN.sum(-1, keepdim=True) + self.hc_eps)
            comb_TNN = comb_TNN / (comb_TNN.sum(-2, keepdim=True) + self.hc_eps)
        return comb_TNN

    def _mix(self, streams_TND: torch.Tensor) -> torch.Tensor:
        """The coefficient network's raw outputs [T, (2 + N) N]: fp32 RMS norm of the
        flattened streams, then `fn`."""
        flat_TF = streams_TND.flatten(1).float()
        flat_TF = flat_TF * torch.rsqrt(flat_TF.square().mean(-1, keepdim=True) + self.norm_eps)
        return F.linear(flat_TF, self.fn.float())

    def forward(self, streams_TND: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(post_TN, comb_TNN, collapsed_TD): expansion and mixing weights, and the sub-layer input.

        `_mix` is recomputed in backward: kept, its two fp32 copies of the flattened streams
        cost 8 B x N x D per token and hyper-connection (3.9 GiB over the 4-layer slice's
        4096 tokens, more than every other activation there); redoing it is one thin matmul."""
        n = self.streams
        if torch.is_grad_enabled():
            mix_TW = checkpoint(self._mix, streams_TND, use_reentrant=False)
        else:
            mix_TW = self._mix(streams_TND)
        pre_TN, post_TN, comb_TM = mix_TW.split([n, n, n * n], dim=-1)
        pre_b, post_b, comb_b = self.base.split([n, n, n * n])
        pre = torch.sigmoid(pre_TN * self.scale[0] + pre_b) + self.hc_eps
        post = 2 * torch.sigmoid(post_TN * self.scale[1] + post_b)
        comb = torch.softmax((comb_TM * self.scale[2] + comb_b).view(-1, n, n), dim=-1) + self.hc_eps
        collapsed_TD = (pre.unsqueeze(-1) * streams_TND).sum(dim=1).to(streams_TND.dtype)
        return post, self._sinkhorn(comb), collapsed_TD


def hc_merge(post_TN: torch.Tensor, comb_TNN: torch.Tensor, out_TD: torch.Tensor,
             residual_TND: torch.Tensor) -> torch.Tensor:
    """New streams: expand the sub-layer output with `post`, add the `comb`-mixed residual."""
    dtype = residual_TND.dtype
    mixed_TND = torch.matmul(comb_TNN.to(dtype).transpose(-1, -2), residual_TND)
    return post_TN.to(dtype).unsqueeze(-1) * out_TD.unsqueeze(-2) + mixed_TND


def expand_streams(x_TD: torch.Tensor, streams: int) -> torch.Tensor:
    """Block entry: every stream starts as the embedding."""
    return x_TD.unsqueeze(1).expand(-1, streams, -1).contiguous()


def contract_streams(streams_TND: torch.Tensor) -> torch.Tensor:
    """Block exit: GLM takes the plain mean of the streams (no learned head)."""
    return streams_TND.mean(dim=1)
