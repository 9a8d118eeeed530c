"""The planner: every derived number of a run, computed once, with where it came from.

Pure Python over the typed config (no torch, ray, vllm or megatron), so `plan` and
`validate` run anywhere in well under a second. Rules read the plan; they never
recompute what is here.
"""
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.config.schema.root import LauncherConfig
from launcher.plan._origin import Origins
from launcher.plan.arch import ArchFacts, arch_key, facts
from launcher.plan.batch import BatchPlan, plan_batch
from launcher.plan.env import plan_env
from launcher.plan.loop import LoopPlan, plan_loop
from launcher.plan.lora import LoraPlan, plan_lora
from launcher.plan.memory import MemoryPlan, plan_memory
from launcher.plan.mesh import MeshPlan, plan_mesh
from launcher.plan.params import ParamCounts, count_params
from launcher.plan.placement import GpuSlot, PlacementPlan, plan_placement
from launcher.plan.routes import RoutesPlan, plan_routes
from launcher.plan.startup import StartupPlan, plan_startup
from launcher.plan.swap import swap_basis, swap_terms
from launcher.plan.sync import SyncPlan, plan_sync
from launcher.plan.timing import TimingPlan, decode_steps_per_round, plan_timing
from launcher.plan.update_wait import update_wait_s

__all__ = ["Plan", "make_plan", "GpuSlot", "MODEL_PARTS"]

MODEL_PARTS = ("arch", "params")
"""Plan parts computed from model.arch alone (facts, count_params): the same for every mesh."""


@dataclass
class Plan:
    arch: ArchFacts
    """Model facts (has mHC/KDA/DSA/MoE, layer schedules) every rule reads."""
    params: ParamCounts
    mesh: MeshPlan
    placement: PlacementPlan
    batch: BatchPlan
    lora: LoraPlan
    memory: MemoryPlan
    sync: SyncPlan
    timing: TimingPlan
    startup: StartupPlan
    routes: RoutesPlan
    """The MoE routes' bytes per step (routing replay / agreement) in the driver and the object store."""
    loop: LoopPlan
    """The step loop's shape (async chunks, in-flight limit, queue; in-flight updates) the driver runs."""
    env: dict[str, str]
    origins: dict[str, str]

    @property
    def mesh_ok(self) -> bool:
        return self.mesh.ok

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["params"].pop("split")
        out["params"]["split"] = {"tp_sharded": self.params.split.tp, "replicated": self.params.split.rep,
                                  "routed_experts": self.params.split.exp}
        return out


def _round_tokens(cfg: LauncherConfig) -> str:
    """What a generation round's decode steps are, for the timing line."""
    if cfg.algorithm.partial_rollout.max_tokens_per_step:
        return f"algorithm.partial_rollout.max_tokens_per_step {decode_steps_per_round(cfg)}"
    return f"max_response_len {cfg.algorithm.max_response_len}"


def make_plan(cfg: LauncherConfig, driver_env: Mapping[str, str] | None = None) -> Plan:
    log = Origins()
    key = arch_key(cfg.model.arch)
    arch = facts(cfg.model.arch, key)
    params = count_params(cfg.model.arch, key)
    log.add("params.total", f"{params.total:,}", "architecture fields (exact count)")
    log.add("params.active", f"{params.active:,}", f"top-{cfg.model.arch.num_experts_per_tok} routed experts per token")
    mesh = plan_mesh(cfg, log)
    placement = plan_placement(cfg, log)
    batch = plan_batch(cfg, mesh.dp, log)
    lora = plan_lora(cfg, mesh.tp, mesh.ep * mesh.etp, arch)
    memory = plan_memory(cfg, params, mesh, lora, arch, log)
    sync = plan_sync(cfg, params, lora, mesh.trainer_gpus)
    log.add("sync.seconds", f"{sync.seconds:.1f}", f"{sync.gib_per_engine:.1f} GiB {sync.kind} over {sync.link}")
    offloaded = memory.host.offloaded_trainer_gib / cfg.cluster.gpus_per_node
    terms = swap_terms(cfg, offloaded, memory.inference.weights_gib, memory.sleep_level)
    if terms:
        log.add("timing.swap_s", f"{sum(terms.values()):.1f}", swap_basis(cfg, terms, offloaded, memory.sleep_level))
    timing = plan_timing(cfg, params, batch, memory.inference, mesh.trainer_gpus, sum(terms.values()), arch.has_kda)
    log.add("timing.generation_s", f"{timing.generation_s:.1f}",
            f"{timing.generation_rounds} round(s) x {timing.generation_round_s:.1f} s: {_round_tokens(cfg)} x "
            f"{timing.decode_step_s * 1e3:.1f} ms a decode step of the "
            f"{cfg.inference.backend.value} engine (measured against its bandwidth floor, plan/timing.py)")
    log.add("timing.rollout_s", f"{timing.rollout_s:.1f}", f"a round {timing.generation_round_s:.1f} s + swap "
            f"{timing.swap_s:.1f} s (the metrics' rollout_s: generation and the colocated swap around it)")
    if timing.canary_s:
        log.add("timing.canary_s", f"{timing.canary_s:.2f}", f"{cfg.run.rollout_checks.canary.prompts} prompts x "
                f"{min(cfg.run.rollout_checks.canary.max_tokens, cfg.algorithm.max_response_len)} tokens a decode step "
                "each on every engine, then one trainer forward over them (plan/timing.py canary_check_s)")
    loop = plan_loop(cfg)
    if (wait := update_wait_s(cfg, loop, timing)) is not None:
        log.add("timing.update_wait_s", f"{wait[0]:.2f}", wait[1])
    log.add("timing.recommended_nccl_timeout_s", timing.recommended_nccl_timeout_s,
            f"{timing.longest_wait_phase} ~{timing.longest_wait_s:.0f} s x margin")
    startup = plan_startup(cfg, memory, sync)
    log.add("startup.seconds", f"{startup.seconds:.0f}", startup.basis)
    routes = plan_routes(cfg, arch, batch, loop, log)
    env = plan_env(cfg, arch, os.environ if driver_env is None else driver_env, log)
    return Plan(arch=arch, params=params, mesh=mesh, placement=placement, batch=batch, lora=lora, memory=memory,
                sync=sync, timing=timing, startup=startup, routes=routes, loop=loop, env=env, origins=log.lines)
