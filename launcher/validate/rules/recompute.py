"""Activation recompute and fused-kernel rules (docs/model.md section 2).

Each rule says whose it is. RECOMP003/004/006/007 are megatron-core 0.19.2's own checks
(TransformerConfig.__post_init__, quoted in their reasons) under the same field names; the
recompute settings map 1:1 onto its recompute_granularity / _method / _num_layers / _modules.
RECOMP001/RECOMP002 are this project's own rules, not megatron-core's: megatron-core 0.19.2
has no mHC, and the project's mHC layer (model/) does not thread megatron's activation
checkpoint managers through the hyper-connections. RECOMP008 warns about settings megatron-core
accepts that the chosen trainer does not apply. tests/unit/test_megatron_agreement.py keeps the
rules and megatron-core in agreement on random meshes and recompute settings.
"""
from launcher.config.schema.choices import RecomputeGranularity, TrainerBackendName
from launcher.validate.registry import error, rule, warning

SELECTIVE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts", "gdn_norm_out")
GDN_ONLY = ("gdn_norm_out",)
"""megatron-core accepts these only with experimental_attention_variant='gated_delta_net'; no model
here has GatedDeltaNet layers (GLM-5.3-Flash's linear attention is KDA, the project's own layer),
so the arch facts never enable them."""
GROUPED_GEMM_ONLY = ("moe_act",)
"""megatron-core accepts these only with moe_grouped_gemm. The megatron backend's routed experts are
always one grouped GEMM (model/megatron/grouped.py), so that holds exactly when the model has MoE layers."""
NOT_WITH_MHC = ("mhc", "layernorm", "mlp")
APPLIED_BY_MEGATRON_MODEL = ("core_attn", "moe", "mlp")
"""What the megatron backend's layer (model/megatron/layer.py) recomputes: the token mixer for core_attn,
the whole MLP sub-layer (dense or MoE) for moe or mlp. tests/unit/test_megatron_agreement.py checks this
against the model itself."""
FULL_METHODS = ("uniform", "block")


def _selective(cfg) -> bool:
    """megatron-core reads recompute_modules only with granularity=selective."""
    return cfg.trainer.recompute.granularity is RecomputeGranularity.selective


@rule("RECOMP001")
def full_with_mhc(cfg, plan):
    """Full recompute is rejected with mHC (this project's rule)."""
    if plan.arch.has_mhc and cfg.trainer.recompute.granularity is RecomputeGranularity.full:
        yield error("trainer.recompute.granularity", "recompute granularity=full with mHC",
                    "This project's rule, not megatron-core's (0.19.2 has no mHC): the project's mHC layer "
                    "(model/megatron/mhc.py) does not thread megatron's activation checkpoint managers through the "
                    "hyper-connections, so whole-layer recompute of its layers is not supported.",
                    "Use granularity=selective with modules=[core_attn, moe].")


@rule("RECOMP002")
def modules_with_mhc(cfg, plan):
    """mhc, layernorm and mlp are not selective-recompute modules with mHC (this project's rule)."""
    if not plan.arch.has_mhc or not _selective(cfg):
        return
    bad = [m for m in cfg.trainer.recompute.modules if m in NOT_WITH_MHC]
    if bad:
        yield error("trainer.recompute.modules", f"recompute modules {bad} with mHC",
                    "This project's rule, not megatron-core's (0.19.2 has no mHC): the project's mHC layer does not "
                    "thread megatron's checkpoint managers, so `mhc` recompute would be silently dropped; its layer "
                    "(model/megatron/layer.py) keeps the norms around the hyper-connections (`layernorm` would be "
                    "dropped too); `mlp` is refused as docs/model.md records for mHC layers (here `moe` already "
                    "recomputes every MLP sub-layer, dense or MoE).",
                    f"Remove {bad}; use e.g. [core_attn, moe].")


@rule("RECOMP003")
def method_and_num_layers(cfg, plan):
    """recompute method / num_layers as megatron-core requires them per granularity."""
    r = cfg.trainer.recompute
    granularity = r.granularity
    if granularity is RecomputeGranularity.selective and r.num_layers is not None:
        yield error("trainer.recompute.num_layers",
                    f"trainer.recompute.num_layers={r.num_layers} with granularity=selective",
                    "megatron-core 0.19.2 raises 'recompute_num_layers must be None' with selective recompute.",
                    "Set trainer.recompute.num_layers=null.")
    if granularity is not RecomputeGranularity.full:
        return
    if r.method is None:
        yield error("trainer.recompute.method", "trainer.recompute.method=null with granularity=full",
                    "megatron-core 0.19.2 raises 'recompute_method must be \"block\" or \"uniform\"' with full "
                    "recompute: it has to know which layers to recompute.",
                    f"Set trainer.recompute.method to one of {list(FULL_METHODS)}.")
    if r.num_layers is None:
        yield error("trainer.recompute.num_layers",
                    "trainer.recompute.num_layers=null with granularity=full",
                    "megatron-core 0.19.2 raises 'recompute_num_layers must be between 1 and "
                    "num_layers_per_pipeline_rank' with full recompute.",
                    f"Set trainer.recompute.num_layers to 1..{cfg.model.arch.num_hidden_layers // cfg.trainer.mesh.pp}.")


@rule("RECOMP004")
def known_modules(cfg, plan):
    """Selective modules are names megatron-core knows."""
    known = SELECTIVE_MODULES + (("mhc",) if plan.arch.has_mhc else ())  # RECOMP002 explains `mhc` with mHC
    unknown = [m for m in cfg.trainer.recompute.modules if m not in known]
    if unknown and _selective(cfg):
        yield error("trainer.recompute.modules", f"unknown recompute modules {unknown}",
                    "megatron-core 0.19.2 asserts 'Invalid choices for recompute_modules' with selective recompute.",
                    f"Use names from {list(SELECTIVE_MODULES)}.")


@rule("RECOMP006")
def gdn_modules_without_gdn(cfg, plan):
    """gdn_norm_out recompute needs gated delta net layers, which no model here has."""
    bad = [m for m in cfg.trainer.recompute.modules if m in GDN_ONLY]
    if bad and _selective(cfg):
        kind = "KDA (Kimi delta attention, this project's own layer)" if plan.arch.has_kda else "none"
        yield error("trainer.recompute.modules", f"recompute modules {bad} without gated delta net",
                    "megatron-core 0.19.2 raises when 'gdn_norm_out' in recompute_modules and "
                    "experimental_attention_variant != 'gated_delta_net' (only its GatedDeltaNet has that norm); "
                    f"this model's linear attention is {kind}, not gated delta net, and no GLM layer is built as one.",
                    f"Remove {bad}; use e.g. [core_attn, moe].")


@rule("RECOMP007")
def moe_act_without_grouped_experts(cfg, plan):
    """moe_act recompute needs grouped-GEMM experts, i.e. MoE layers."""
    bad = [m for m in cfg.trainer.recompute.modules if m in GROUPED_GEMM_ONLY]
    if bad and _selective(cfg) and not plan.arch.has_moe:
        keep = ["core_attn"] + ([] if plan.arch.has_mhc else ["mlp"])
        yield error("trainer.recompute.modules", f"recompute modules {bad} without MoE layers",
                    "megatron-core 0.19.2 raises when 'moe_act' in recompute_modules and not moe_grouped_gemm. The "
                    "megatron backend runs routed experts as one grouped GEMM (model/megatron/grouped.py) whenever the "
                    "model has MoE layers; this one has none (model.arch.mlp_layer_types / n_routed_experts).",
                    f"Remove {bad}; use e.g. {keep}.")


@rule("RECOMP008")
def recompute_not_applied(cfg, plan):
    """Recompute settings the chosen trainer backend does not apply."""
    r, f = cfg.trainer.recompute, plan.arch
    if cfg.trainer.backend is TrainerBackendName.hf:
        if r.granularity is not RecomputeGranularity.none:
            yield warning("trainer.recompute.granularity",
                          f"trainer.recompute.granularity={r.granularity.value} with trainer.backend=hf",
                          "The hf trainer (launcher/workers/hf) recomputes no activations, yet the planner's "
                          "activation memory counts the recompute's savings.",
                          "Set trainer.recompute.granularity=none, or trainer.backend=megatron.")
        return
    if not _selective(cfg):
        return
    rejected = GDN_ONLY + (NOT_WITH_MHC if f.has_mhc else ()) + (() if f.has_moe else GROUPED_GEMM_ONLY)
    ignored = [m for m in r.modules if m in SELECTIVE_MODULES and m not in APPLIED_BY_MEGATRON_MODEL + rejected]
    if ignored:
        yield warning("trainer.recompute.modules",
                      f"recompute modules {ignored} are not applied by the megatron backend",
                      "megatron-core accepts them, but this project's layer (model/megatron/layer.py) recomputes only "
                      "the token mixer (core_attn) and the whole MLP sub-layer (moe, mlp): these activations are kept, "
                      "and the planner counts no saving for them.",
                      f"Remove {ignored}; `moe` recomputes the whole MoE sub-layer.")


@rule("RECOMP005")
def selective_without_modules(cfg, plan):
    """Selective recompute with no modules recomputes nothing."""
    r = cfg.trainer.recompute
    if r.granularity is RecomputeGranularity.selective and not r.modules:
        yield warning("trainer.recompute.modules", "granularity=selective with an empty module list",
                      "Nothing is recomputed, so activations cost as much as with granularity=none.",
                      "List modules, e.g. [core_attn, moe], or set granularity=none.")


@rule("MHC001")
def fused_mhc(cfg, plan):
    """Fused mHC kernels are incompatible with GLM's eps-inside-sqrt norm."""
    if cfg.trainer.use_fused_mhc and plan.arch.has_mhc:
        yield error("trainer.use_fused_mhc", "trainer.use_fused_mhc=true",
                    "The fused kernels compute x / (rms + eps); GLM normalises with x * rsqrt(mean(x^2) + eps), "
                    "so outputs silently differ from the checkpoint's.",
                    "Set trainer.use_fused_mhc=false.")
