"""Activation recompute and fused-kernel rules for models with mHC (DOMAIN.md section 2)."""
from launcher.validate.registry import error, rule, warning

SELECTIVE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts", "gdn_norm_out")
NOT_WITH_MHC = ("mhc", "layernorm", "mlp")


@rule("RECOMP001")
def full_with_mhc(cfg, plan):
    """Full recompute is rejected with mHC."""
    if plan.arch.has_mhc and cfg.trainer.recompute.granularity.value == "full":
        yield error("RECOMP001", "trainer.recompute.granularity", "recompute granularity=full with mHC",
                    "megatron-core rejects full activation recompute for hyper-connection layers at model build.",
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
                    "The mHC layer does not thread `mhc` recompute (silently dropped) and rejects layernorm and mlp.",
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
    unknown = [m for m in cfg.trainer.recompute.modules if m not in known]
    if unknown:
        yield error("RECOMP004", "trainer.recompute.modules", f"unknown recompute modules {unknown}",
                    "megatron-core 0.19.2 rejects unknown selective-recompute module names.",
                    f"Use names from {list(SELECTIVE_MODULES)}.")


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
