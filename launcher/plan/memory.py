"""Per-GPU and per-node memory: trainer, inference, colocated phases, host.

Colocated runs alternate two phases on the same GPUs. Generation: the engine owns its
gpu_memory_utilization budget while the trainer has offloaded weights, grads and
optimizer and keeps only its runtime reserve. Training: the trainer's full footprint
plus what a sleeping engine keeps (sleep_level 0 never releases the budget).
Host memory per node: sleeping engines' weights (sleep level 1), the colocated
trainer's offloaded state, and CPU-offloaded optimizer state.
"""
from dataclasses import dataclass

from launcher.plan._arch import ArchFacts
from launcher.plan._memory_inference import ENGINE_ASLEEP_GIB, InferenceMemory, engine_reserve, inference_memory
from launcher.plan._memory_trainer import TrainerMemory, trainer_memory
from launcher.plan.lora import LoraPlan
from launcher.plan.mesh import MeshPlan
from launcher.plan.params import ParamCounts
from launcher.schema.root import LauncherConfig


@dataclass
class PhaseMemory:
    generation_gib: float
    training_gib: float
    peak_gib: float


@dataclass
class HostMemory:
    sleeping_engine_weights_gib: float
    offloaded_trainer_gib: float
    optimizer_offload_gib: float
    total_per_node_gib: float


@dataclass
class MemoryPlan:
    trainer: TrainerMemory
    inference: InferenceMemory
    colocated: PhaseMemory | None
    host: HostMemory


def _phases(cfg: LauncherConfig, tr: TrainerMemory, inf: InferenceMemory) -> PhaseMemory:
    generation = inf.budget_gib + tr.runtime_gib
    asleep = engine_reserve(ENGINE_ASLEEP_GIB, cfg.cluster.gpu.arch.value)
    engine_asleep = inf.budget_gib if cfg.inference.sleep_level == 0 else asleep
    training = tr.total_gib + engine_asleep
    return PhaseMemory(generation_gib=generation, training_gib=training, peak_gib=max(generation, training))


def _host(cfg: LauncherConfig, tr: TrainerMemory, inf: InferenceMemory, colocated: bool) -> HostMemory:
    gpn = cfg.cluster.gpus_per_node
    sleeping = inf.weights_gib * gpn if colocated and cfg.inference.sleep_level == 1 else 0.0
    offloaded = (tr.weights_gib + tr.grads_gib + tr.optimizer_gib + tr.lora_gib) * gpn if colocated else 0.0
    optim = tr.optimizer_host_gib * gpn
    return HostMemory(sleeping_engine_weights_gib=sleeping, offloaded_trainer_gib=offloaded,
                      optimizer_offload_gib=optim, total_per_node_gib=sleeping + offloaded + optim)


def plan_memory(cfg: LauncherConfig, params: ParamCounts, mesh: MeshPlan, lora: LoraPlan, f: ArchFacts) -> MemoryPlan:
    tr = trainer_memory(cfg, params, mesh, lora, f)
    inf = inference_memory(cfg, params, f)
    colocated = cfg.placement.mode.value == "colocated"
    return MemoryPlan(trainer=tr, inference=inf, colocated=_phases(cfg, tr, inf) if colocated else None,
                      host=_host(cfg, tr, inf, colocated))
