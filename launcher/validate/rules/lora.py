"""LoRA rules: MoE rank normalisation, adapter sync with vLLM, targetable modules, what the
hf backends' peft adapters can hold."""
from launcher.config.schema.choices import InferenceBackendName, TrainerBackendName
from launcher.plan.arch import DSA, KDA
from launcher.plan.lora import ATTENTION_TARGETS, EXPERT_PARAMETERS, KNOWN_TARGETS, VLLM_LORA_RANKS
from launcher.plan.sync import SyncKind
from launcher.validate.registry import error, rule

NOT_TARGETABLE = ("f_b_proj", "g_b_proj")


def _adapter_sync(plan) -> bool:
    return plan.sync.kind is SyncKind.adapter


@rule("LORA001")
def rank_divides_topk(cfg, plan):
    """rank % top-k == 0 with normalize_moe_lora."""
    lora, k = cfg.trainer.lora, cfg.model.arch.num_experts_per_tok
    if plan.lora.enabled and lora.normalize_moe_lora and plan.arch.has_moe and lora.rank % k:
        yield error("trainer.lora.rank",
                    f"trainer.lora.rank={lora.rank} is not divisible by top-k model.arch.num_experts_per_tok={k}",
                    "normalize_moe_lora gives each routed expert rank / top-k; it must be a whole number.",
                    f"Use a rank that is a multiple of {k}, or normalize_moe_lora=false.")


@rule("LORA002")
def vllm_rank(cfg, plan):
    """Adapter sync needs a vLLM-legal max_lora_rank."""
    vllm = cfg.inference.backend is InferenceBackendName.vllm
    if _adapter_sync(plan) and vllm and cfg.trainer.lora.rank not in VLLM_LORA_RANKS:
        yield error("trainer.lora.rank", f"trainer.lora.rank={cfg.trainer.lora.rank} with adapter sync",
                    "vLLM's max_lora_rank only takes " + ", ".join(map(str, VLLM_LORA_RANKS)) + ".",
                    "Pick the rank from that list, or set trainer.lora.merge=true.")


@rule("LORA003")
def experts_in_vllm_targets(cfg, plan):
    """Adapter sync of a MoE model needs `experts` among inference.lora_targets."""
    if (_adapter_sync(plan) and cfg.inference.backend is InferenceBackendName.vllm and plan.arch.has_moe
            and "experts" not in cfg.inference.lora_targets):
        yield error("inference.lora_targets",
                    f"inference.lora_targets={list(cfg.inference.lora_targets)} lacks `experts` with adapter sync",
                    "vLLM fails with 'LoRA context must be set' when the MoE experts are not a LoRA target.",
                    "Add `experts` to inference.lora_targets.")


@rule("LORA004")
def untargetable(cfg, plan):
    """f_b_proj and g_b_proj cannot be LoRA targets."""
    if not plan.lora.enabled:
        return
    for key, targets in (("trainer.lora.targets", cfg.trainer.lora.targets),
                         ("inference.lora_targets", cfg.inference.lora_targets)):
        bad = [t for t in targets if t in NOT_TARGETABLE]
        if bad:
            yield error(key, f"{key} includes {bad}",
                        "These KDA projections are non-contiguous views in vLLM's LoRA kernel.",
                        f"Remove {bad} from {key}.")


@rule("LORA005")
def known_targets(cfg, plan):
    """Trainer LoRA targets are module names of the model."""
    lora = cfg.trainer.lora
    if not plan.lora.enabled or not plan.arch.is_glm5_next:
        return
    unknown = [t for t in lora.targets if t not in KNOWN_TARGETS]
    if unknown:
        yield error("trainer.lora.targets", f"unknown LoRA targets {unknown}",
                    "A target that matches no module silently trains nothing there.",
                    f"Use names from {list(KNOWN_TARGETS)}.")


@rule("LORA006")
def targets_without_rank(cfg, plan):
    """Targets given with rank 0: the run would be full fine-tuning, not the LoRA they ask for."""
    lora = cfg.trainer.lora
    if lora.rank == 0 and lora.targets:
        yield error("trainer.lora.targets", f"trainer.lora.rank={lora.rank} with {len(lora.targets)} targets "
                    f"{list(lora.targets)}",
                    "rank 0 is full fine-tuning: every weight trains (its optimizer state, memory and full "
                    "weight sync) and the targets are ignored, a different run from the LoRA one they name.",
                    "Set trainer.lora.rank > 0 for LoRA (e.g. trainer.lora.rank=8), or trainer.lora.targets=[] "
                    "for full fine-tuning.")


@rule("LORA007")
def rank_not_negative(cfg, plan):
    """rank >= 0."""
    if cfg.trainer.lora.rank < 0:
        yield error("trainer.lora.rank", f"trainer.lora.rank={cfg.trainer.lora.rank}",
                    "A rank is a count of adapter dimensions.", "Use 0 (full fine-tuning) or a positive rank.")


@rule("LORA008")
def shared_expert_adapters_with_etp(cfg, plan):
    """A shared routed-expert adapter needs etp = 1 on the megatron trainer."""
    lora = cfg.trainer.lora
    routed = any(t in ("linear_fc1", "linear_fc2") for t in lora.targets)
    if (plan.lora.enabled and lora.share_expert_adapters and routed and plan.arch.has_moe
            and cfg.trainer.backend is TrainerBackendName.megatron and plan.mesh.etp > 1):
        yield error("trainer.lora.share_expert_adapters",
                    f"trainer.lora.share_expert_adapters=true with trainer.mesh.etp={plan.mesh.etp}",
                    "A shared adapter is one dense weight for all of a layer's experts; with ETP each rank "
                    "holds a slice of every expert's width, and the data-parallel grad sum would add up "
                    "different slices of the shared adapter.",
                    "Set trainer.lora.share_expert_adapters=false (one adapter per expert follows the ETP "
                    "split), or trainer.mesh.etp=1.")


VLLM_UNSERVED_TARGETS = {"linear_kv_up_proj": "kv_b_proj"}
"""Trainer targets vLLM 0.32 loads an adapter for but never applies (vllm#48974): MLA's
attention reads kv_b_proj's weight once, absorbed into W_UK / W_UV (mla_attention.py
process_weights_after_loading), and never calls the LoRA-wrapped layer."""


@rule("LORA009")
def vllm_unserved_targets(cfg, plan):
    """Adapter sync to vLLM cannot serve a LoRA on MLA's kv_b_proj."""
    if not (_adapter_sync(plan) and cfg.inference.backend is InferenceBackendName.vllm):
        return
    bad = [t for t in cfg.trainer.lora.targets if t in VLLM_UNSERVED_TARGETS]
    if bad:
        modules = [VLLM_UNSERVED_TARGETS[t] for t in bad]
        yield error("trainer.lora.targets",
                    f"trainer.lora.targets includes {bad} (vLLM's {modules}) with adapter sync",
                    "vLLM's MLA attention uses that module only through weights absorbed at load time, so its "
                    "adapter loads without error and changes no output (vllm#48974): the engines would sample "
                    "from another policy than the one trained.",
                    f"Remove {bad} from trainer.lora.targets, or set trainer.lora.merge=true (merged sync).")


@rule("LORA010")
def rank_without_targets(cfg, plan):
    """LoRA (rank > 0) needs at least one target."""
    lora = cfg.trainer.lora
    if plan.lora.enabled and not lora.targets:
        yield error("trainer.lora.targets", f"trainer.lora.rank={lora.rank} with trainer.lora.targets=[]",
                    "A LoRA run trains only its adapters and freezes the rest: with no target there is nothing "
                    "to train.",
                    "Name the modules to adapt, e.g. trainer.lora.targets=[linear_proj,linear_fc1,linear_fc2,q_proj], "
                    "or set trainer.lora.rank=0 for full fine-tuning.")


@rule("LORA011")
def hf_shared_expert_adapters(cfg, plan):
    """The hf trainer adapts each routed expert on its own: it cannot share one adapter."""
    lora = cfg.trainer.lora
    routed = any(t in EXPERT_PARAMETERS for t in lora.targets)
    if (plan.lora.enabled and lora.share_expert_adapters and routed and plan.arch.has_moe
            and cfg.trainer.backend is TrainerBackendName.hf):
        yield error("trainer.lora.share_expert_adapters",
                    "trainer.lora.share_expert_adapters=true with trainer.backend=hf",
                    "The hf trainer adapts the routed experts' fused parameters through peft's target_parameters, "
                    "which holds one adapter per expert; it has no adapter shared by a layer's experts, so the "
                    "run would train a different adapter from the one configured.",
                    "Set trainer.lora.share_expert_adapters=false, or trainer.backend=megatron.")


@rule("LORA012")
def targets_in_the_model(cfg, plan):
    """At least one LoRA target is a module of the model (an attention target of a layer kind it has)."""
    lora, a = cfg.trainer.lora, plan.arch
    if not plan.lora.enabled or not lora.targets or not a.is_glm5_next:
        return
    layers = {KDA: a.n_kda, DSA: a.n_dsa}
    if all(t in ATTENTION_TARGETS and not layers[ATTENTION_TARGETS[t][0]] for t in lora.targets):
        kinds = sorted({ATTENTION_TARGETS[t][0] for t in lora.targets})
        yield error("trainer.lora.targets", f"trainer.lora.targets={list(lora.targets)} are modules of {kinds} layers only; "
                    f"the model has {a.n_kda} KDA and {a.n_dsa} DSA layers",
                    "No module of the model is a target, so there would be nothing to train (the trainers' peft / "
                    "Megatron wrapping finds no layer).",
                    "Add targets the model has: linear_fc1 and linear_fc2 (every layer's MLP), or the attention "
                    "projections of its layer kinds (KDA: q_proj, k_proj, v_proj, o_proj; DSA: linear_proj, "
                    "linear_q_down_proj, ...).")


@rule("LORA013")
def hf_expert_lora_is_glm5_next(cfg, plan):
    """The hf trainer's routed-expert LoRA follows glm5_next's fused experts."""
    lora = cfg.trainer.lora
    routed = [t for t in lora.targets if t in EXPERT_PARAMETERS]
    if (plan.lora.enabled and routed and plan.arch.has_moe and not plan.arch.is_glm5_next
            and cfg.trainer.backend is TrainerBackendName.hf):
        yield error("trainer.lora.targets",
                    f"trainer.lora.targets includes {routed} on model_type {cfg.model.arch.model_type} with "
                    "trainer.backend=hf",
                    "peft rewrites the LoRA config of this MoE family itself (transformers' v4 -> v5 conversion): "
                    "the experts' gate and up adapters become one of twice the rank with independent A, which "
                    "cannot be sent per expert at trainer.lora.rank as every engine and export loads adapters.",
                    f"Set trainer.lora.targets=[{','.join(_without(lora.targets, routed))}], leaving the routed "
                    "experts out.")


def _without(targets, dropped: list[str]) -> list[str]:
    """`targets` less `dropped`, or KDA's attention projections when nothing is left."""
    return [t for t in targets if t not in dropped] or ["q_proj", "k_proj", "v_proj", "o_proj"]
