"""Trainer mesh rules (docs/model.md section 2): divisibility, mHC/KDA limits, sequence parallel."""
from launcher.config.schema.choices import TrainerBackendName
from launcher.validate.registry import error, rule, warning


@rule("MESH001")
def world_divides(cfg, plan):
    """The trainer GPUs divide into tp x pp x cp."""
    m, world = cfg.trainer.mesh, plan.mesh.world
    if plan.mesh.dp is None:
        yield error("trainer.mesh.tp",
                    f"{world} trainer GPUs do not divide by tp {m.tp} x pp {m.pp} x cp {m.cp} = {m.tp * m.pp * m.cp}",
                    "Megatron needs world = tp x pp x cp x dp with an integer dp >= 1.",
                    f"Choose tp x pp x cp among the divisors of {world}, or change the cluster/placement.")


@rule("MESH002")
def pp_with_mhc(cfg, plan):
    """Pipeline parallel must be 1 for models with mHC."""
    if plan.arch.has_mhc and cfg.trainer.mesh.pp != 1:
        yield error("trainer.mesh.pp",
                    f"trainer.mesh.pp={cfg.trainer.mesh.pp} with mHC (model.arch.hc_mult={cfg.model.arch.hc_mult})",
                    "megatron-core 0.19.2 has no mHC; this project's model keeps the hc_mult residual streams in "
                    "one stage: the trainer builds pp=1 whatever the mesh says.",
                    "Set trainer.mesh.pp=1 and use tp/ep for memory instead.")


@rule("MESH003")
def cp_with_kda(cfg, plan):
    """Context parallel must be 1 for models with KDA layers."""
    if plan.arch.has_kda and cfg.trainer.mesh.cp != 1:
        yield error("trainer.mesh.cp",
                    f"trainer.mesh.cp={cfg.trainer.mesh.cp} with KDA (linear_attention) layers",
                    "KDA has no context-parallel implementation: the recurrent state cannot be split by sequence.",
                    "Set trainer.mesh.cp=1; bound activations with max_tokens_per_microbatch and recompute.")


@rule("MESH004")
def expert_grid_divides(cfg, plan):
    """ep x etp x pp divides the trainer GPUs (expert data parallel is an integer)."""
    m, world = plan.mesh, plan.mesh.world
    if m.edp is None:
        unset = " (etp unset: Megatron uses etp = tp)" if cfg.trainer.mesh.etp is None else ""
        yield error("trainer.mesh.etp",
                    f"expert grid ep {m.ep} x etp {m.etp} x pp {m.pp} = {m.ep * m.etp * m.pp} does not divide "
                    f"{world} trainer GPUs{unset}",
                    "Experts are laid out on an ep x etp grid replicated edp times; initialize_model_parallel "
                    "fails minutes into the launch otherwise.",
                    "Set trainer.mesh.etp=1 (usual for MoE) or pick ep so that ep x etp divides tp x cp x dp.")


@rule("MESH005")
def experts_divide_ep(cfg, plan):
    """The routed experts divide by ep."""
    n, ep = cfg.model.arch.n_routed_experts, cfg.trainer.mesh.ep
    if plan.arch.has_moe and n % ep:
        legal = [d for d in range(1, n + 1) if n % d == 0]
        yield error("trainer.mesh.ep", f"model.arch.n_routed_experts={n} is not divisible by ep={ep}",
                    "Each EP rank holds n_routed_experts / ep whole experts (a bare assert when the MoE layer is built).",
                    f"Use an ep among {legal}.")


@rule("MESH006")
def heads_divide_tp(cfg, plan):
    """Attention heads and KDA heads divide by tp."""
    a, tp, f = cfg.model.arch, cfg.trainer.mesh.tp, plan.arch
    checks = [("num_attention_heads", a.num_attention_heads, True), ("linear_num_heads", a.linear_num_heads, f.has_kda)]
    for name, heads, applies in checks:
        if applies and heads % tp:
            yield error("trainer.mesh.tp", f"model.arch.{name}={heads} is not divisible by trainer.mesh.tp={tp}",
                        "Tensor parallelism splits heads across ranks; a rank cannot hold a fraction of a head.",
                        f"Use a tp that divides {heads}.")


@rule("MESH007")
def widths_divide(cfg, plan):
    """Dense and shared-expert widths divide by tp; the expert width divides by etp."""
    a, f, tp, etp = cfg.model.arch, plan.arch, plan.mesh.tp, plan.mesh.etp
    widths = [("intermediate_size", a.intermediate_size, tp, "tp", f.n_dense > 0)]
    shared = a.moe_intermediate_size * a.n_shared_experts
    widths.append(("moe_intermediate_size x n_shared_experts", shared, tp, "tp", f.has_moe and shared > 0))
    widths.append(("moe_intermediate_size", a.moe_intermediate_size, etp, "etp", f.has_moe))
    for name, width, size, axis, applies in widths:
        if applies and width % size:
            yield error(f"trainer.mesh.{axis}", f"model.arch.{name}={width} is not divisible by {axis}={size}",
                        "Column/row-parallel linears split their width evenly across ranks.",
                        f"Use a {axis} that divides {width}.")


@rule("MESH008")
def sequence_parallel_needs_tp(cfg, plan):
    """sequence_parallel needs tp > 1."""
    m = cfg.trainer.mesh
    if m.sequence_parallel and m.tp == 1:
        yield error("trainer.mesh.sequence_parallel", "sequence_parallel=true with tp=1",
                    "Sequence parallelism shards activations inside the TP group; megatron-core rejects it without one.",
                    "Set trainer.mesh.sequence_parallel=false, or tp > 1.")


@rule("MESH009")
def megatron_tp_needs_sequence_parallel(cfg, plan):
    """The megatron backend with tp > 1 needs sequence_parallel."""
    m = cfg.trainer.mesh
    if cfg.trainer.backend is TrainerBackendName.megatron and m.tp > 1 and not m.sequence_parallel:
        moe = (" (MoE: megatron-core's MoE layer also raises in its first training forward without it; "
               "the config only warns)") if plan.arch.has_moe else ""
        yield error("trainer.mesh.sequence_parallel",
                    f"sequence_parallel=false with tp={m.tp} on the megatron backend "
                    f"({'MoE' if plan.arch.has_moe else 'dense'} model)",
                    "This project's Megatron layers always shard activations across the TP group when tp > 1 "
                    f"(model/megatron/parallel.py), so the setting would be ignored{moe}.",
                    "Set trainer.mesh.sequence_parallel=true (or tp=1).")


@rule("MESH010")
def etp_explicit(cfg, plan):
    """etp left unset resolves to tp (Megatron's default)."""
    m = cfg.trainer.mesh
    if m.etp is None and plan.arch.has_moe and m.tp > 1:
        yield warning("trainer.mesh.etp", f"trainer.mesh.etp unset: resolved to tp={m.tp}",
                      "Megatron's expert_tensor_parallel_size defaults to tp, not 1; most MoE layouts want 1.",
                      "Set trainer.mesh.etp explicitly (1 for MoE with ep > 1).")


@rule("MESH011")
def layers_divide_pp(cfg, plan):
    """num_hidden_layers divides by pp."""
    n, pp = cfg.model.arch.num_hidden_layers, cfg.trainer.mesh.pp
    if n % pp:
        yield error("trainer.mesh.pp", f"model.arch.num_hidden_layers={n} is not divisible by pp={pp}",
                    "Each pipeline stage holds the same number of layers; megatron-core does not check this in the config.",
                    f"Use a pp among {[d for d in range(1, n + 1) if n % d == 0]}.")


@rule("MESH012")
def cluster_has_gpus(cfg, plan):
    """The cluster has the GPUs the placement needs."""
    have = cfg.cluster.nodes * cfg.cluster.gpus_per_node
    if plan.placement.gpus_needed > have:
        yield error("placement.trainer_nodes",
                    f"placement needs {plan.placement.gpus_needed} GPUs, cluster `{cfg.cluster.name}` has {have} "
                    f"({cfg.cluster.nodes} x {cfg.cluster.gpus_per_node})",
                    "Ray would wait forever for a placement group it cannot schedule.",
                    "Lower placement.trainer_nodes / inference_nodes or pick a larger cluster.")


@rule("MESH013")
def megatron_fixed_layout(cfg, plan):
    """The megatron backend builds pp=1 and cp=1 for every model (the mHC and KDA cases, with
    their own reasons, are MESH002 and MESH003)."""
    m = cfg.trainer.mesh
    if cfg.trainer.backend is not TrainerBackendName.megatron:
        return
    for key, size, covered in (("pp", m.pp, plan.arch.has_mhc), ("cp", m.cp, plan.arch.has_kda)):
        if size != 1 and not covered:
            yield error(f"trainer.mesh.{key}", f"trainer.mesh.{key}={size} with trainer.backend=megatron",
                        "This project's Megatron model (model/megatron) has no pipeline stages and no "
                        "context-parallel split for any model: the trainer builds pp=1, cp=1 whatever the mesh says.",
                        f"Set trainer.mesh.{key}=1 and use tp/ep/dp for memory.")
