"""Trainer memory per GPU (docs/model.md section 3).

Assumptions, each a named constant or a line below:
- Weights in the model dtype; frozen LoRA bases cost only their weights.
- Full fine-tuning with Megatron's distributed optimizer: fp32 main grads (4 B/param) on
  every rank, fp32 master + Adam m, v (12 B/param) sharded over d = dp x cp for dense
  params and edp for experts; optimizer.cpu_offload moves those 12 B to host memory.
- Activations of one packed micro-batch of max_tokens_per_microbatch tokens, per layer per
  token in bf16: the hc_mult-wide mHC residual (stored at both hc modules) and norm inputs,
  sharded by tp when sequence_parallel is on; attention projections unless core_attn is
  recomputed; MLP intermediates unless mlp/moe is recomputed (per routed assignment: its
  input and output rows, fc1's gate|up output and fc2's input; benchmarks/activation_bytes.py
  measures what model/megatron keeps, part by part); only layer inputs under full
  recompute. Plus the log-prob loss's [tokens, vocab / tp] tensors: bf16 logits, their fp32
  upcast, the fp32 log-softmax and its fp32 gradient (LOSS_BYTES_PER_LOGIT; with only the
  fp32 pair the planner read 16% low against a measured H200 LoRA step of the 4-layer slice).
- A fixed runtime reserve: CUDA context, NCCL communicators and allocator fragmentation.
"""
from dataclasses import dataclass

from launcher.config.schema.choices import RecomputeGranularity
from launcher.config.schema.root import LauncherConfig
from launcher.plan.arch import DSA, KDA, SPARSE, ArchFacts
from launcher.plan.lora import LoraPlan
from launcher.plan.mesh import MeshPlan
from launcher.plan.params import ParamCounts

GIB = 2**30
ACT_BYTES = 2  # bf16 activations
LOSS_BYTES_PER_LOGIT = 2 + 4 + 4 + 4
TRAINER_RUNTIME_GIB = {"cpu": 0.25}
"""CUDA context + NCCL communicators + allocator fragmentation; a CPU worker has none of them."""
GPU_TRAINER_RUNTIME_GIB = 3.0


def trainer_runtime_gib(gpu_arch: str) -> float:
    return TRAINER_RUNTIME_GIB.get(gpu_arch, GPU_TRAINER_RUNTIME_GIB)
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass
class TrainerMemory:
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    optimizer_host_gib: float
    lora_gib: float
    activations_gib: float
    runtime_gib: float
    total_gib: float


def local_params(params: ParamCounts, mesh: MeshPlan) -> tuple[float, float]:
    """(dense, expert) parameters held by one GPU."""
    s = params.split
    dense = (s.tp / mesh.tp + s.rep) / mesh.pp
    expert = s.exp / (mesh.ep * mesh.etp * mesh.pp)
    return dense, expert


def _attention_bytes_per_token(cfg: LauncherConfig, kind: str, recomputed: set[str], tp: int) -> float:
    a = cfg.model.arch
    if "core_attn" in recomputed:
        return 0.0
    if kind == KDA:
        return 6 * a.linear_num_heads * a.linear_head_dim * ACT_BYTES / tp
    if kind == DSA:
        heads = a.num_attention_heads * (2 * (a.qk_nope_head_dim + a.qk_rope_head_dim) + 2 * a.v_head_dim)
        return (a.q_lora_rank + a.kv_lora_rank) * ACT_BYTES + heads * ACT_BYTES / tp
    hd = a.head_dim or a.hidden_size // a.num_attention_heads
    return (a.num_attention_heads + 2 * a.num_key_value_heads) * hd * 2 * ACT_BYTES / tp


def _mlp_bytes_per_token(cfg: LauncherConfig, kind: str, recomputed: set[str], tp: int, etp: int) -> float:
    a = cfg.model.arch
    if kind != SPARSE:
        return 0.0 if "mlp" in recomputed else 3 * a.intermediate_size * ACT_BYTES / tp
    if "moe" in recomputed:
        return 0.0
    routed = a.num_experts_per_tok * (3 * a.moe_intermediate_size / etp + 2 * a.hidden_size) * ACT_BYTES
    return routed + 3 * a.moe_intermediate_size * a.n_shared_experts * ACT_BYTES / tp


def activation_bytes(cfg: LauncherConfig, mesh: MeshPlan, f: ArchFacts) -> float:
    """Peak activation bytes of one micro-batch on one GPU."""
    t, a = cfg.trainer, cfg.model.arch
    tokens = t.max_tokens_per_microbatch / mesh.cp
    sp_div = mesh.tp if t.mesh.sequence_parallel else 1
    streams = max(a.hc_mult, 1)
    boundary = (2 * streams + 2) * a.hidden_size * ACT_BYTES / sp_div
    granularity = t.recompute.granularity
    recomputed = set(t.recompute.modules) if granularity is RecomputeGranularity.selective else set()
    per_token = 0.0
    for (kind, mlp), layers in f.layer_pairs:
        per_layer = boundary
        if granularity is not RecomputeGranularity.full:
            per_layer += _attention_bytes_per_token(cfg, kind, recomputed, mesh.tp)
            per_layer += _mlp_bytes_per_token(cfg, mlp, recomputed, mesh.tp, mesh.etp)
        per_token += per_layer * layers
    logits = tokens * mesh.padded_vocab / mesh.tp * LOSS_BYTES_PER_LOGIT
    return tokens * per_token + logits


def trainer_memory(cfg: LauncherConfig, params: ParamCounts, mesh: MeshPlan, lora: LoraPlan,
                   f: ArchFacts) -> TrainerMemory:
    dense, expert = local_params(params, mesh)
    weight_bytes = DTYPE_BYTES[cfg.model.dtype.value]
    weights = (dense + expert) * weight_bytes
    dp_shards = (mesh.dp or 1) * mesh.cp
    edp = mesh.edp or 1
    offload = cfg.trainer.optimizer.cpu_offload
    if lora.enabled:
        grads = optimizer = 0.0
        lora_bytes = lora.params_per_gpu * (6 + (0 if offload else 12 / dp_shards))
        opt_host = lora.params_per_gpu * 12 / dp_shards if offload else 0.0
    else:
        grads = (dense + expert) * 4
        opt = dense * 12 / dp_shards + expert * 12 / edp
        optimizer, opt_host = (0.0, opt) if offload else (opt, 0.0)
        lora_bytes = 0.0
    acts = activation_bytes(cfg, mesh, f)
    runtime = trainer_runtime_gib(cfg.cluster.gpu.arch.value)
    parts = [weights / GIB, grads / GIB, optimizer / GIB, lora_bytes / GIB, acts / GIB, runtime]
    return TrainerMemory(
        weights_gib=parts[0], grads_gib=parts[1], optimizer_gib=parts[2], optimizer_host_gib=opt_host / GIB,
        lora_gib=parts[3], activations_gib=parts[4], runtime_gib=runtime, total_gib=sum(parts),
    )
