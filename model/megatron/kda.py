"""GLM-5.3-Flash's KDA token mixer with KDA heads split over tensor-parallel ranks.

Per rank: q/k/v/b/f_b/g_b projections, the conv channels, dt_bias and A_log hold this
rank's heads; f_a/g_a (rank-128 bottlenecks) and the output norm are duplicated; o_proj
is row-parallel. Matches HF Glm5NextTextLinearAttention (lower-bounded gate, fp32 conv,
sigmoid-gated RMSNorm). Shape legend: T tokens, H local heads, K head width, D hidden.
"""
import torch
import torch.nn.functional as F
from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

from model.megatron.kda_ops import causal_conv_silu, kda
from model.megatron.packing import Packed
from model.megatron.parallel import ShardedLinear, enter_tp, exit_tp, mark_duplicated, split_size, tp_size
from model.megatron.spec import ModelSpec


class KDAttention(torch.nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        width, dtype, head_dim = spec.kda_width, spec.dtype, spec.linear_head_dim
        self.heads = split_size(spec.linear_num_heads, tp_size(), "linear_num_heads")
        self.head_dim = head_dim
        self.lower_bound = spec.linear_lower_bound
        self.eps = spec.rms_norm_eps
        for name in ("q_proj", "k_proj", "v_proj"):
            setattr(self, name, ShardedLinear(spec.hidden_size, width, "column", dtype))
        self.b_proj = ShardedLinear(spec.hidden_size, spec.linear_num_heads, "column", dtype)
        self.f_a_proj = ShardedLinear(spec.hidden_size, head_dim, "duplicated", dtype)
        self.f_b_proj = ShardedLinear(head_dim, width, "column", dtype)
        self.g_a_proj = ShardedLinear(spec.hidden_size, head_dim, "duplicated", dtype)
        self.g_b_proj = ShardedLinear(head_dim, width, "column", dtype)
        self.o_proj = ShardedLinear(width, spec.hidden_size, "row", dtype)
        local = self.heads * head_dim
        self.conv1d = _column_param(3 * local, spec.linear_conv_kernel_dim, stride=3)
        self.dt_bias = _column_param(local)
        self.A_log = _column_param(self.heads)
        self.o_norm = mark_duplicated(torch.nn.Parameter(torch.ones(head_dim, dtype=dtype)))

    def _gate(self, x_TD: torch.Tensor) -> torch.Tensor:
        """Per-channel log decay, lower-bounded as in GLM (else Kimi's softplus form). Not
        fused (model/megatron/fused.py): inductor's exp and sigmoid moved the 4-layer
        slice's KL to HF from 0.0014 to 0.0122."""
        raw_THK = (self.f_b_proj(self.f_a_proj(x_TD)).float() + self.dt_bias).view(x_TD.shape[0], self.heads, -1)
        rate_H1 = self.A_log.float().exp().view(self.heads, 1)
        if self.lower_bound is not None:
            return self.lower_bound * torch.sigmoid(rate_H1 * raw_THK)
        return -rate_H1 * F.softplus(raw_THK)

    def _gated_norm(self, core_THK: torch.Tensor, gate_THK: torch.Tensor) -> torch.Tensor:
        """fp32 RMSNorm times sigmoid(gate), cast back (HF Glm5NextTextRMSNormGated). Not
        fused: that moved the 4-layer slice's KL to HF from 0.0014 to 0.0049."""
        core = core_THK.float()
        core = core * torch.rsqrt(core.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.o_norm.float() * core * torch.sigmoid(gate_THK.float())).to(core_THK.dtype)

    def forward(self, x_TlD: torch.Tensor, packed: Packed) -> torch.Tensor:
        x_TD = enter_tp(x_TlD)
        tokens = x_TD.shape[0]
        qkv_TC = torch.cat([self.q_proj(x_TD), self.k_proj(x_TD), self.v_proj(x_TD)], dim=-1)
        qkv_TC = causal_conv_silu(qkv_TC, self.conv1d, packed).to(x_TD.dtype)
        q_THK, k_THK, v_THK = (t.view(tokens, self.heads, -1) for t in qkv_TC.chunk(3, dim=-1))
        beta_TH = torch.sigmoid(self.b_proj(x_TD))
        core_THK = kda(q_THK, k_THK, v_THK, self._gate(x_TD), beta_TH, packed)
        gate_THK = self.g_b_proj(self.g_a_proj(x_TD)).view(tokens, self.heads, -1)
        out_TC = self._gated_norm(core_THK, gate_THK).reshape(tokens, -1)
        return exit_tp(self.o_proj(out_TC))


def _column_param(*shape: int, stride: int = 1) -> torch.nn.Parameter:
    """An fp32 tensor split with this rank's heads (conv taps, dt_bias, A_log stay fp32 as in HF)."""
    param = torch.nn.Parameter(torch.zeros(*shape, dtype=torch.float32))
    set_tensor_model_parallel_attributes(param, tp_size() > 1, 0, stride)
    return param
