"""KDA (Kimi Delta Attention) math on a packed token stream: fla's chunk_kda on CUDA,
a pure-torch recurrence elsewhere (so the CPU tests run the same layer code).

Both paths take the gate `g` already in log space (GLM's lower-bounded form) and beta after
its sigmoid, and L2-normalise q and k inside, which is how HF glm5_next calls the kernel.
Shape legend: T tokens, H local KDA heads, K = V head width, C conv channels.
"""
import torch
import torch.nn.functional as F

from model.megatron.packing import Packed


def causal_conv_silu(x_TC: torch.Tensor, weight_CK: torch.Tensor, packed: Packed) -> torch.Tensor:
    """Depthwise causal conv + SiLU per sequence, in the weight's dtype (fp32).

    The same F.conv1d call HF makes (cuDNN, TF32 where PyTorch allows it), one sequence at
    a time so no tap reads across a sequence start; bitwise HF's result for one sequence.
    """
    kernel, channels = weight_CK.shape[1], weight_CK.shape[0]
    outs = []
    for start, end in packed.bounds:
        seq_1CS = x_TC[start:end].to(weight_CK.dtype).T.unsqueeze(0)
        out_CS = F.conv1d(seq_1CS, weight_CK.unsqueeze(1), padding=kernel - 1, groups=channels)[0, :, : end - start]
        outs.append(out_CS.T)
    return F.silu(torch.cat(outs))


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    """fla's l2norm: eps inside the sqrt."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def _recurrent_one(q_SHK, k_SHK, v_SHV, g_SHK, beta_SH) -> torch.Tensor:
    """The delta rule with per-channel decay, one token at a time, fp32 state [H, K, V]."""
    heads, dim_k = q_SHK.shape[1:]
    q_SHK = _l2norm(q_SHK) * dim_k ** -0.5
    k_SHK = _l2norm(k_SHK)
    state_HKV = q_SHK.new_zeros(heads, dim_k, v_SHV.shape[-1])
    outs = []
    for t in range(q_SHK.shape[0]):
        state_HKV = state_HKV * g_SHK[t].exp().unsqueeze(-1)
        memory_HV = (state_HKV * k_SHK[t].unsqueeze(-1)).sum(-2)
        delta_HV = (v_SHV[t] - memory_HV) * beta_SH[t].unsqueeze(-1)
        state_HKV = state_HKV + k_SHK[t].unsqueeze(-1) * delta_HV.unsqueeze(-2)
        outs.append((state_HKV * q_SHK[t].unsqueeze(-1)).sum(-2))
    return torch.stack(outs)


def kda_torch(q_THK, k_THK, v_THV, g_THK, beta_TH, packed: Packed) -> torch.Tensor:
    """Reference KDA in fp32, sequence by sequence; returns the input dtype."""
    args = [t.float() for t in (q_THK, k_THK, v_THV, g_THK, beta_TH)]
    outs = [_recurrent_one(*(a[start:end] for a in args)) for start, end in packed.bounds]
    return torch.cat(outs).to(q_THK.dtype)


def kda_fla(q_THK, k_THK, v_THV, g_THK, beta_TH, packed: Packed) -> torch.Tensor:
    """fla's chunked Triton kernel over the packed stream (batch 1 + cu_seqlens).

    A single sequence goes without cu_seqlens: the same kernel specialisation HF uses, so
    one Triton compile serves both (each specialisation costs minutes of autotuning).
    Packed, the host copy of cu_seqlens spares fla a device-to-host read (a GPU stall).
    """
    from fla.ops.kda import chunk_kda

    cu_seqlens = cu_seqlens_cpu = None
    if len(packed.bounds) > 1:
        cu_seqlens = packed.cu_seqlens.long()
        cu_seqlens_cpu = torch.tensor([start for start, _ in packed.bounds] + [packed.total])
    out_1THV, _ = chunk_kda(q_THK[None], k_THK[None], v_THV[None], g_THK[None], beta_TH[None],
                            use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu)
    return out_1THV[0]


def kda(q_THK, k_THK, v_THV, g_THK, beta_TH, packed: Packed) -> torch.Tensor:
    fn = kda_fla if q_THK.is_cuda else kda_torch
    return fn(q_THK, k_THK, v_THV, g_THK, beta_TH, packed)
