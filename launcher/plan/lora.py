"""LoRA adapter sizes from the target list: what the trainer stores and what adapter sync ships.

Megatron target names map to (in, out) widths per layer kind. Routed experts get their
own adapters on linear_fc1/linear_fc2 (rank / top-k with normalize_moe_lora, one shared
adapter per layer with share_expert_adapters). Per-GPU counts divide TP-sharded modules
by tp and expert adapters by ep x etp: an approximation, the replicated half of each
adapter pair is under 1% of GPU memory.
"""
import re
from dataclasses import dataclass

from launcher.config.schema.root import LauncherConfig
from launcher.plan.arch import DSA, KDA, ArchFacts
from model.names import ATTENTION_MODULES, MLP_PROJECTIONS

# name -> (layer kind it lives in, sharded by TP)
ATTENTION_TARGETS = {
    "linear_q_down_proj": (DSA, False), "linear_q_up_proj": (DSA, True),
    "linear_kv_down_proj": (DSA, False), "linear_kv_up_proj": (DSA, True), "linear_proj": (DSA, True),
    "q_proj": (KDA, True), "k_proj": (KDA, True), "v_proj": (KDA, True), "b_proj": (KDA, True),
    "f_a_proj": (KDA, False), "g_a_proj": (KDA, False), "o_proj": (KDA, True),
    "f_b_proj": (KDA, True), "g_b_proj": (KDA, True),
}
MLP_TARGETS = ("linear_fc1", "linear_fc2")
KNOWN_TARGETS = tuple(ATTENTION_TARGETS) + MLP_TARGETS
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The only values vLLM's LoRAConfig.max_lora_rank takes (docs/model.md section 4): adapter
sync rounds trainer.lora.rank up to one (workers/vllm/args.py); rule LORA002 checks it."""

MEGATRON_TO_CHECKPOINT = {**{m: [h] for m, h in ATTENTION_MODULES.items()},
                          **{m: list(p) for m, p in MLP_PROJECTIONS.items()}}
"""Megatron target -> the module names it is in the checkpoint (model/names.py, the one name
table); transformers' in-memory module paths end the same way (`forget_gate.f_a_proj`)."""


EXPERT_PARAMETERS = {"linear_fc1": "mlp.experts.gate_up_proj", "linear_fc2": "mlp.experts.down_proj"}
"""Megatron routed-expert target -> the fused 3-D parameter transformers' MoE models hold
([experts, out, in]; gate|up rows for fc1), which peft adapts with `target_parameters`."""
FUSED_EXPERT_PROJECTIONS = 2
"""Checkpoint projections in one fused gate|up parameter (MLP_PROJECTIONS["linear_fc1"])."""


def adapter_kwargs(lora_cfg, expert_rank: int | None = None) -> dict:
    """peft LoraConfig arguments for `trainer.lora`: what the hf trainer wraps and every
    trainer sends to the engines with an adapter. Plain data (it crosses Ray). Routed
    experts get one adapter per expert on each fused parameter, as the Megatron trainer's
    linear_fc1/linear_fc2 (one A shared by gate and up), at `expert_rank` (plan.lora's,
    smaller with normalize_moe_lora) with the same alpha: scale alpha / expert_rank, as
    Megatron's. Rule LORA010 guarantees targets."""
    names = sorted({hf for t in lora_cfg.targets for hf in MEGATRON_TO_CHECKPOINT.get(t, [t])})
    # A regex so the frozen vision tower never gets adapters.
    pattern = r".*(language_model|model\.layers)\..*\.(" + "|".join(map(re.escape, names)) + r")$"
    kwargs = {"r": lora_cfg.rank, "lora_alpha": lora_cfg.alpha, "target_modules": pattern, "lora_dropout": 0.0}
    experts = sorted(EXPERT_PARAMETERS[t] for t in set(lora_cfg.targets) if t in EXPERT_PARAMETERS)
    if experts:
        kwargs["target_parameters"] = experts
    if experts and expert_rank not in (None, lora_cfg.rank):
        kwargs["rank_pattern"] = {re.escape(p): expert_rank for p in experts}
    return kwargs


def loading_kwargs(kwargs: dict) -> dict:
    """`adapter_kwargs` as the adapter loads in checkpoint names (what every trainer sends
    and exports, and vLLM serves: per-expert gate_proj, up_proj, down_proj, each padded to
    rank r and rescaled to alpha / r, as the Megatron trainer sends a normalize_moe_lora
    one) into a transformers model with fused experts. peft converts such names by
    transformers' rules (peft/utils/transformers_weight_conversion.py) into its own layout,
    which fixes two things: an expert's gate and up adapters become one of twice the rank
    (A stacked, B block-diagonal), so the gate|up wrapper is built at 2r with 2 alpha (the
    same scale); and that wrapper sits inside a down_proj one, so down_proj is wrapped too
    (with linear_fc2 untargeted its adapter stays zero: B starts at zero)."""
    experts = kwargs.get("target_parameters")
    if not experts:
        return kwargs
    loading = {k: v for k, v in kwargs.items() if k != "rank_pattern"}
    gate_up, down = EXPERT_PARAMETERS["linear_fc1"], EXPERT_PARAMETERS["linear_fc2"]
    if gate_up in experts:
        key = re.escape(gate_up)
        loading |= {"target_parameters": sorted({gate_up, down}),
                    "rank_pattern": {key: kwargs["r"] * FUSED_EXPERT_PROJECTIONS},
                    "alpha_pattern": {key: kwargs["lora_alpha"] * FUSED_EXPERT_PROJECTIONS}}
    return loading


def peft_kwargs(lora_cfg) -> dict:
    """The LoraConfig an exported adapter folder carries: it loads with PeftModel.from_pretrained."""
    return loading_kwargs(adapter_kwargs(lora_cfg))


@dataclass
class LoraPlan:
    enabled: bool
    """LoRA is on (trainer.lora.rank > 0); off is full fine-tuning. The one place it is asked:
    everything after the plan reads this."""
    rank: int
    expert_rank: int
    """Each routed expert's adapter rank: trainer.lora.rank, divided by top-k with
    normalize_moe_lora. Written here only; the Megatron trainer's apply_lora takes it."""
    params_total: int
    params_per_gpu: int
    params_shipped: int = 0
    """The adapter as adapter sync and `export --adapter` send it (workers/megatron/_export.py,
    workers/hf/names.py): per checkpoint module, so a fused gate|up adapter's A goes twice, and
    every routed expert's at `rank` (a normalize_moe_lora one zero-padded to it, a shared one
    repeated per expert)."""


def _attention_widths(cfg: LauncherConfig) -> dict[str, tuple[int, int]]:
    a = cfg.model.arch
    h, kda_w = a.hidden_size, a.linear_num_heads * a.linear_head_dim
    return {
        "linear_q_down_proj": (h, a.q_lora_rank),
        "linear_q_up_proj": (a.q_lora_rank, a.num_attention_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)),
        "linear_kv_down_proj": (h, a.kv_lora_rank + a.qk_rope_head_dim),
        "linear_kv_up_proj": (a.kv_lora_rank, a.num_attention_heads * (a.qk_nope_head_dim + a.v_head_dim)),
        "linear_proj": (a.num_attention_heads * a.v_head_dim, h),
        "q_proj": (h, kda_w), "k_proj": (h, kda_w), "v_proj": (h, kda_w), "b_proj": (h, a.linear_num_heads),
        "f_a_proj": (h, a.linear_head_dim), "g_a_proj": (h, a.linear_head_dim), "o_proj": (kda_w, h),
        "f_b_proj": (a.linear_head_dim, kda_w), "g_b_proj": (a.linear_head_dim, kda_w),
    }


def _mlp_adapter(rank: int, h: int, inter: int, targets: list[str]) -> int:
    fc1 = rank * (h + 2 * inter) if "linear_fc1" in targets else 0
    fc2 = rank * (inter + h) if "linear_fc2" in targets else 0
    return fc1 + fc2


def _shipped_mlp(rank: int, h: int, inter: int, targets: list[str]) -> int:
    """_mlp_adapter as sent: gate and up each with their own copy of fc1's A."""
    return _mlp_adapter(rank, h, inter, targets) + (rank * h if "linear_fc1" in targets else 0)


def plan_lora(cfg: LauncherConfig, tp: int, expert_shards: int, f: ArchFacts) -> LoraPlan:
    lora, a = cfg.trainer.lora, cfg.model.arch
    if lora.rank <= 0:
        return LoraPlan(enabled=False, rank=0, expert_rank=0, params_total=0, params_per_gpu=0)
    widths = _attention_widths(cfg)
    topk = max(a.num_experts_per_tok, 1)
    expert_rank = lora.rank // topk if lora.normalize_moe_lora else lora.rank  # LORA001: a whole number >= 1
    layers_of = {KDA: f.n_kda, DSA: f.n_dsa}
    total = per_gpu = attention = 0.0
    for name in lora.targets:
        if name in ATTENTION_TARGETS:
            kind, sharded = ATTENTION_TARGETS[name]
            n = lora.rank * sum(widths[name]) * layers_of[kind]
            total += n
            attention += n
            per_gpu += n / tp if sharded else n
    dense = _mlp_adapter(lora.rank, a.hidden_size, a.intermediate_size, lora.targets) * f.n_dense
    shared = _mlp_adapter(lora.rank, a.hidden_size, a.moe_intermediate_size * a.n_shared_experts, lora.targets)
    one = _mlp_adapter(expert_rank, a.hidden_size, a.moe_intermediate_size, lora.targets)
    routed = one if lora.share_expert_adapters else one * a.n_routed_experts
    total += dense + (shared + routed) * f.n_moe
    per_gpu += dense / tp + (shared / tp + (routed if lora.share_expert_adapters else routed / expert_shards)) * f.n_moe
    h, r = a.hidden_size, lora.rank
    shipped = attention + _shipped_mlp(r, h, a.intermediate_size, lora.targets) * f.n_dense + (
        _shipped_mlp(r, h, a.moe_intermediate_size * a.n_shared_experts, lora.targets)
        + _shipped_mlp(r, h, a.moe_intermediate_size, lora.targets) * a.n_routed_experts) * f.n_moe
    return LoraPlan(enabled=True, rank=lora.rank, expert_rank=expert_rank, params_total=int(total),
                    params_per_gpu=int(per_gpu), params_shipped=int(shipped))
