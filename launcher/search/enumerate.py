"""Enumerate trainer meshes x inference layouts for a recipe, validate each, rank the legal ones.

Candidates are built by replacing the mesh and inference sections of the composed config
(no re-composition), then planned and checked by the same planner and rules as
`validate`, so a listed mesh's numbers are exactly what `plan` prints for it. Rules that
read none of the VARIED paths run once per search (launcher.validate.split).
pp is fixed to 1 for models with mHC and cp to 1 for models with KDA; sequence_parallel
is on whenever tp > 1 (MoE needs it).
"""
import dataclasses
import itertools
from collections import Counter
from dataclasses import dataclass, field

from launcher.config.schema.choices import PlacementMode
from launcher.plan import MODEL_PARTS, Plan, make_plan
from launcher.plan.arch import facts
from launcher.search.cost import StepEstimate, estimate_step
from launcher.validate.split import split_rules

VARIED_CONFIG = ("cfg.trainer.mesh", "cfg.inference.engines", "cfg.inference.tp", "cfg.inference.ep")
"""What `candidates` replaces; with every plan part but MODEL_PARTS, what candidates may change."""
VARIED = VARIED_CONFIG + tuple(f"plan.{f.name}" for f in dataclasses.fields(Plan) if f.name not in MODEL_PARTS)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass
class MeshPoint:
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    dp: int
    edp: int
    inference_engines: int
    inference_tp: int
    trainer_gib: float
    inference_gib: float
    colocated_peak_gib: float | None
    headroom_gib: float
    step: StepEstimate
    warnings: list[str] = field(default_factory=list)


@dataclass
class SearchResult:
    candidates: int = 0
    meshes: list[MeshPoint] = field(default_factory=list)
    rejected_by_rule: Counter = field(default_factory=Counter)


def _trainer_sections(cfg, world: int):
    """cfg.trainer with each mesh; built once per mesh, shared by all its inference layouts."""
    f = facts(cfg.model.arch)
    pps = [1] if f.has_mhc else divisors(world)
    cps = [1] if f.has_kda else divisors(world)
    eps = [e for e in divisors(cfg.model.arch.n_routed_experts) if e <= world] if f.has_moe else [1]
    for tp, pp, cp, ep, etp in itertools.product(divisors(world), pps, cps, eps, divisors(world)):
        if tp * pp * cp <= world and ep * etp * pp <= world:
            mesh = dataclasses.replace(cfg.trainer.mesh, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, sequence_parallel=tp > 1)
            yield dataclasses.replace(cfg.trainer, mesh=mesh)


def _inference_sections(cfg, gpus: int, colocated: bool):
    """cfg.inference with each engine layout (engines x tp over the inference GPUs)."""
    for tp in divisors(gpus):
        engines = gpus // tp if colocated else max(gpus // tp, 1)
        yield dataclasses.replace(cfg.inference, engines=engines, tp=tp, ep=1 if cfg.inference.ep == 1 else tp)


def candidates(cfg, base: Plan):
    """Every trainer mesh x inference layout of cfg, as configs; `base`: cfg's own plan."""
    colocated = cfg.placement.mode is PlacementMode.colocated
    inf_gpus = base.mesh.trainer_gpus if colocated else len(base.placement.inference_nodes) * cfg.cluster.gpus_per_node
    inferences = list(_inference_sections(cfg, inf_gpus, colocated))
    for trainer in _trainer_sections(cfg, base.mesh.trainer_gpus):
        for inference in inferences:
            yield dataclasses.replace(cfg, trainer=trainer, inference=inference)


def _point(variant, plan, findings) -> MeshPoint:
    m, mem = plan.mesh, plan.memory
    cap = variant.cluster.gpu.memory_gib
    peak = mem.colocated.peak_gib if mem.colocated else max(mem.trainer.total_gib, mem.inference.budget_gib)
    return MeshPoint(
        tp=m.tp, pp=m.pp, cp=m.cp, ep=m.ep, etp=m.etp, dp=m.dp, edp=m.edp,
        inference_engines=variant.inference.engines, inference_tp=variant.inference.tp,
        trainer_gib=mem.trainer.total_gib, inference_gib=mem.inference.total_gib,
        colocated_peak_gib=mem.colocated.peak_gib if mem.colocated else None, headroom_gib=cap - peak,
        step=estimate_step(variant, plan), warnings=[f.id for f in findings])


def search(cfg, driver_env=None) -> SearchResult:
    """Every candidate planned and checked; legal ones ranked by estimated step time."""
    driver_env = {} if driver_env is None else driver_env
    base = make_plan(cfg, driver_env=driver_env)
    rules = split_rules(cfg, base, VARIED)
    result = SearchResult()
    for variant in candidates(cfg, base):
        result.candidates += 1
        plan = make_plan(variant, driver_env=driver_env)
        findings = rules.check(variant, plan)
        errors = [f for f in findings if f.severity == "error"]
        if errors:
            result.rejected_by_rule[errors[0].id] += 1
            continue
        result.meshes.append(_point(variant, plan, findings))
    result.meshes.sort(key=lambda p: p.step.total_s)
    return result
