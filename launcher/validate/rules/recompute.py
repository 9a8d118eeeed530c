"""Activation recompute and fused-kernel rules for models with mHC (DOMAIN.md section 2).

RECOMP001/RECOMP002 are this project's own rules, not megatron-core's: megatron-core 0.19.2
has no mHC, and the project's mHC layer (model/) does not thread megatron's activation
checkpoint managers through the hyper-connections.
"""
from launcher.validate.registry import error, rule, warning

SELECTIVE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts", "gdn_norm_out")
GDN_ONLY = ("gdn_norm_out",)
"""megatron-core accepts these only when the model has gated delta net layers; no model here has
any (GLM-5.3-Flash's linear attention is KDA), so the arch facts never enable them."""
NOT_WITH_MHC = ("mhc", "layernorm", "mlp")


@rule("RECOMP001")
def full_with_mhc(cfg, plan):
    """Full recompute is rejected with mHC."""
    if plan.arch.has_mhc and cfg.trainer.recompute.granularity.value == "full":
        yield error("RECOMP001", "trainer.recompute.granularity", "recompute granularity=full with mHC",
                    "This project's rule, not megatron-core's (0.19.2 has no mHC): the project's mHC layer does not "
                    "thread megatron's activation checkpoint managers, so full recompute of its layers is not supported.",
                    "Use granularity=selective with modules=[core_attn, moe].")


@rule("RECOMP002")
def modules_with_mhc(cfg, plan):
    """mhc, layernorm and mlp are not selective-recompute modules with mHC."""
    r = cfg.trainer.recompute
    if not plan.arch.has_mhc or r.granularity.value != "selective":
        return
    bad = [m for m in r.modules if m in NOT_WITH_MHC]
    if bad:
        yield error("RECOMP002", "trainer.recompute.modules", f"recompute modules {bad} with mHC",
                    "This project's rule, not megatron-core's (0.19.2 has no mHC): the project's mHC layer does not "
                    "thread megatron's checkpoint managers, so `mhc` recompute would be silently dropped, and it "
                    "rejects layernorm and mlp.",
                    f"Remove {bad}; use e.g. [core_attn, moe].")


@rule("RECOMP003")
def selective_num_layers(cfg, plan):
    """Selective recompute needs num_layers null."""
    r = cfg.trainer.recompute
    if r.granularity.value == "selective" and r.num_layers is not None:
        yield error("RECOMP003", "trainer.recompute.num_layers",
                    f"trainer.recompute.num_layers={r.num_layers} with granularity=selective",
                    "megatron-core only accepts recompute_num_layers with full recompute.",
                    "Set trainer.recompute.num_layers=null.")


@rule("RECOMP004")
def known_modules(cfg, plan):
    """Selective modules are names megatron-core knows."""
    known = SELECTIVE_MODULES + (("mhc",) if plan.arch.has_mhc else ())  # RECOMP002 explains `mhc` with mHC
    unknown = [m for m in cfg.trainer.recompute.modules if m not in known and m not in GDN_ONLY]
    if unknown:
        yield error("RECOMP004", "trainer.recompute.modules", f"unknown recompute modules {unknown}",
                    "megatron-core 0.19.2 rejects unknown selective-recompute module names.",
                    f"Use names from {list(SELECTIVE_MODULES)}.")


@rule("RECOMP006")
def gdn_modules_without_gdn(cfg, plan):
    """gdn_norm_out recompute needs gated delta net layers."""
    bad = [m for m in cfg.trainer.recompute.modules if m in GDN_ONLY]
    if bad and cfg.trainer.recompute.granularity.value == "selective":
        kind = "KDA (kimi delta attention)" if plan.arch.has_kda else "none"
        yield error("RECOMP006", "trainer.recompute.modules", f"recompute modules {bad} without gated delta net",
                    f"megatron-core accepts {bad} only when the model has gated delta net layers; this model's "
                    f"linear attention is {kind}, not GDN.",
                    f"Remove {bad}; use e.g. [core_attn, moe].")


@rule("RECOMP005")
def selective_without_modules(cfg, plan):
    """Selective recompute with no modules recomputes nothing."""
    r = cfg.trainer.recompute
    if r.granularity.value == "selective" and not r.modules:
        yield warning("RECOMP005", "trainer.recompute.modules", "granularity=selective with an empty module list",
                      "Nothing is recomputed, so activations cost as much as with granularity=none.",
                      "List modules, e.g. [core_attn, moe], or set granularity=none.")


@rule("MHC001")
def fused_mhc(cfg, plan):
    """Fused mHC kernels are incompatible with GLM's eps-inside-sqrt norm."""
    if cfg.trainer.use_fused_mhc and plan.arch.has_mhc:
        yield error("MHC001", "trainer.use_fused_mhc", "trainer.use_fused_mhc=true",
                    "The fused kernels compute x / (rms + eps); GLM normalises with x * rsqrt(mean(x^2) + eps), "
                    "so outputs silently differ from the checkpoint's.",
                    "Set trainer.use_fused_mhc=false.")
