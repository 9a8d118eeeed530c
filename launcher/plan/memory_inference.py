"""Inference engine memory per GPU (docs/model.md sections 3 and 4).

Assumptions:
- Weights in the model dtype over the engine's tp GPUs (experts too: with
  enable_expert_parallel they are split over the same GPUs); replicated parts stay whole.
  With inference.weights_dtype fp8 the quantized matrices (all sharded) weigh 1 B an element
  plus a 4 B scale per 128x128 block (launcher/plan/fp8.py).
- KDA keeps a constant fp32 recurrent state (heads x dim x dim) plus a bf16 conv state
  (3 x width x (kernel - 1)) per sequence and layer, split by tp.
- DSA layers cache the MLA latent (kv_lora_rank + rope, kv dtype) per token, replicated on
  every TP rank, plus indexer keys of 132 B (128 fp8 + a 4 B scale) per pool.
- Plain-attention layers (non-GLM model types) cache K and V per token, split by tp.
- The cache is sized for max_num_seqs sequences of max_model_len (the worst case).
- CUDA graphs and the profile-run activations are a reserve inside the budget; the
  sampler's logits plus CUDA context and NCCL live outside gpu_memory_utilization.
"""
from dataclasses import dataclass

from launcher.config.schema.choices import KvCacheDtype
from launcher.config.schema.root import LauncherConfig
from launcher.plan.arch import ArchFacts
from launcher.plan.fp8 import engine_saving_bytes
from launcher.plan.memory_trainer import DTYPE_BYTES, GIB
from launcher.plan.params import ParamCounts

INDEX_KEY_BYTES_PER_POOL = 132
# GPU engine reserves; a CPU engine has no CUDA graphs, context or NCCL buffers.
ENGINE_GRAPHS_GIB = {"cpu": 0.0, "gpu": 2.0}
ENGINE_CONTEXT_GIB = {"cpu": 0.25, "gpu": 2.5}
ENGINE_ASLEEP_GIB = {"cpu": 0.0, "gpu": 1.0}
"""Context + graph pool a sleeping engine keeps on the GPU."""


def engine_reserve(table: dict[str, float], gpu_arch: str) -> float:
    return table["cpu" if gpu_arch == "cpu" else "gpu"]


@dataclass
class InferenceMemory:
    weights_gib: float
    kda_state_mib_per_seq: float
    dsa_cache_kib_per_token: float
    cache_gib: float
    graphs_gib: float
    total_gib: float
    budget_gib: float
    max_len_sequences_in_budget: int
    outside_budget_gib: float
    """What must stay free outside gpu_memory_utilization: context, NCCL, sampler logits."""


def _kv_bytes(cfg: LauncherConfig) -> int:
    kv = cfg.inference.kv_cache_dtype
    return 1 if kv is KvCacheDtype.fp8 else (DTYPE_BYTES[cfg.model.dtype.value] if kv is KvCacheDtype.auto else 2)


def per_sequence_bytes(cfg: LauncherConfig, f: ArchFacts) -> tuple[float, float]:
    """(constant state bytes per sequence, cache bytes per token) on one engine GPU."""
    a, tp = cfg.model.arch, cfg.inference.tp
    kv = _kv_bytes(cfg)
    width = a.linear_num_heads * a.linear_head_dim
    kda = f.n_kda * (a.linear_num_heads * a.linear_head_dim**2 * 4 + 3 * width * (a.linear_conv_kernel_dim - 1) * 2) / tp
    pool = INDEX_KEY_BYTES_PER_POOL / max(a.index_kpool, 1)
    dsa = f.n_dsa * ((a.kv_lora_rank + a.qk_rope_head_dim) * kv + pool)
    full = len(f.layer_types) - f.n_kda - f.n_dsa
    hd = a.head_dim or a.hidden_size // a.num_attention_heads
    gqa = full * 2 * a.num_key_value_heads * hd * kv / tp
    return kda, dsa + gqa


def inference_memory(cfg: LauncherConfig, params: ParamCounts, f: ArchFacts) -> InferenceMemory:
    inf, a = cfg.inference, cfg.model.arch
    s = params.split
    weights = (s.tp / inf.tp + s.rep + s.exp / inf.tp) * DTYPE_BYTES[cfg.model.dtype.value] \
        - engine_saving_bytes(cfg) / inf.tp
    state, per_token = per_sequence_bytes(cfg, f)
    per_seq = state + inf.max_model_len * per_token
    cache = inf.max_num_seqs * per_seq
    gpu_arch = cfg.cluster.gpu.arch.value
    graphs = engine_reserve(ENGINE_GRAPHS_GIB, gpu_arch)
    total = (weights + cache) / GIB + graphs
    budget = inf.gpu_memory_utilization * cfg.cluster.gpu.memory_gib
    room = (budget - graphs) * GIB - weights
    sampler = inf.max_num_seqs * a.vocab_size * 4 * 3 / GIB  # logits, probs, logprobs in fp32
    return InferenceMemory(
        weights_gib=weights / GIB, kda_state_mib_per_seq=state / 2**20, dsa_cache_kib_per_token=per_token / 1024,
        cache_gib=cache / GIB, graphs_gib=graphs, total_gib=total, budget_gib=budget,
        max_len_sequences_in_budget=max(int(room // per_seq), 0) if per_seq else 0,
        outside_budget_gib=engine_reserve(ENGINE_CONTEXT_GIB, gpu_arch) + sampler,
    )
