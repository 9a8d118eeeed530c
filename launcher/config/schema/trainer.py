"""`trainer:` section: the training group (Megatron or HF), its mesh, memory knobs and LoRA."""
from dataclasses import dataclass, field
from typing import Optional

from launcher.config.schema.choices import RecomputeGranularity, RecomputeMethod, TrainerBackendName


@dataclass
class MeshConfig:
    tp: int = 1
    """Tensor parallel size; divides attention heads, KDA heads and dense widths. MoE with tp > 1 needs sequence_parallel."""
    pp: int = 1
    """Pipeline parallel size; must be 1 for models with mHC (arch.hc_mult > 1)."""
    cp: int = 1
    """Context parallel size; must be 1 for models with KDA layers."""
    ep: int = 1
    """Expert parallel size; divides arch.n_routed_experts; ep x etp divides tp x cp x dp."""
    etp: Optional[int] = None
    """Expert tensor parallel size; null = Megatron's default, which is tp (not 1). Set it."""
    sequence_parallel: bool = False
    """Shard activations along the sequence inside TP regions; needs tp > 1, and MoE with tp > 1 needs it."""


@dataclass
class RecomputeConfig:
    granularity: RecomputeGranularity = RecomputeGranularity.none
    """`selective` recomputes the listed modules; `full` whole layers (rejected with mHC)."""
    modules: list[str] = field(default_factory=list)
    """Selective modules (megatron-core's names): core_attn, moe_act, layernorm, mla_up_proj, mlp, moe,
    shared_experts, gdn_norm_out. With mHC not layernorm, mlp or mhc; moe_act needs MoE layers;
    gdn_norm_out needs gated delta net, which no GLM has (KDA is not). The megatron backend applies
    core_attn, moe and mlp (RECOMP008 warns about the rest)."""
    method: Optional[RecomputeMethod] = None
    """Full recompute method (uniform | block); null for selective."""
    num_layers: Optional[int] = None
    """Layers per recompute chunk for full recompute; must be null for selective."""


@dataclass
class OptimizerConfig:
    lr: float = 1.0e-5
    """Adam learning rate (constant)."""
    weight_decay: float = 0.0
    """Decoupled weight decay (AdamW)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip; 0 = off."""
    cpu_offload: bool = False
    """Keep fp32 master weights and Adam moments in host RAM (Megatron optimizer offload);
    saves 12 B/param of GPU memory, costs host memory (checked against cluster.host_memory_gib)."""


@dataclass
class LoraConfig:
    rank: int = 0
    """LoRA rank; 0 = full fine-tuning. With normalize_moe_lora, rank % arch.num_experts_per_tok == 0."""
    alpha: float = 32.0
    """LoRA scaling numerator (scale = alpha / rank)."""
    targets: list[str] = field(default_factory=list)
    """Megatron module names that get adapters (linear_q_down_proj, ..., KDA q_proj ...);
    linear_fc1 / linear_fc2 adapt every MLP, the routed experts' too (one adapter per expert).
    f_b_proj and g_b_proj cannot be targets (vLLM's LoRA kernel needs contiguous weights);
    a rank > 0 needs at least one (LORA010)."""
    merge: bool = True
    """true: merge adapters and sync the whole model to the engines every step; false: sync
    only the adapter (needs a vLLM-legal rank and `experts` in inference.lora_targets)."""
    share_expert_adapters: bool = False
    """One adapter shared by all routed experts of a layer instead of one per expert (the
    megatron trainer only: the hf trainer's peft holds one per expert, LORA011)."""
    normalize_moe_lora: bool = False
    """Divide the routed experts' LoRA rank by top-k so the expert adapter budget matches a dense one."""


@dataclass
class TrainerConfig:
    backend: TrainerBackendName = TrainerBackendName.hf
    """`megatron` for GPU clusters, `hf` (transformers + torch) for CPU/one-GPU runs and as reference."""
    mesh: MeshConfig = field(default_factory=MeshConfig)
    """Parallel layout; dp is derived: world / (tp x pp x cp)."""
    recompute: RecomputeConfig = field(default_factory=RecomputeConfig)
    """Activation recompute."""
    max_tokens_per_microbatch: int = 4096
    """Token budget of one packed micro-batch; must hold one full sequence (prompt + response)."""
    micro_batch_size: int = 1
    """Sequences per micro-batch when not packing (hf backend); packing uses the token budget."""
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """Optimizer settings."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA settings (rank 0 = full fine-tuning)."""
    use_fused_mhc: bool = False
    """Megatron's fused mHC kernels compute 1/(rms+eps): wrong for GLM's eps-inside-sqrt norm; keep off."""
    nccl_timeout_s: int = 600
    """Collective timeout (seconds); must exceed the planner's longest-wait estimate."""
