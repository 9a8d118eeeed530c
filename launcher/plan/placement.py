"""Which node/GPU hosts each trainer rank and each inference engine.

Colocated: trainer rank i owns GPU i (node-major) and engine j spans GPUs
[j*tp, (j+1)*tp) of the same set, so every GPU holds one trainer rank and one engine
shard. Async: trainer nodes first, inference nodes after them, disjoint.
"""
import functools
from dataclasses import dataclass

from launcher.config.schema.choices import PlacementMode
from launcher.config.schema.root import LauncherConfig
from launcher.plan._origin import Origins


@dataclass(frozen=True)
class GpuSlot:
    node: int
    gpu: int


SHARED_GPU_FRACTION = 0.5


@dataclass
class PlacementPlan:
    mode: str
    trainer_nodes: list[int]
    inference_nodes: list[int]
    trainer_slots: list[GpuSlot]
    engine_slots: list[list[GpuSlot]]
    gpus_needed: int
    """GPUs the placement occupies (async: trainer + inference; colocated: the shared set)."""
    gpu_fraction: float
    """The share of a GPU each trainer rank and engine worker asks Ray for: half where a
    trainer rank and an engine share the GPU (colocated), else all of it."""


@functools.lru_cache(maxsize=256)
def _slots(nodes: tuple[int, ...], gpus_per_node: int) -> list[GpuSlot]:
    """Cached: mesh search plans thousands of points on the same nodes."""
    return [GpuSlot(n, g) for n in nodes for g in range(gpus_per_node)]


def _engines(slots: list[GpuSlot], engines: int, tp: int) -> list[list[GpuSlot]]:
    return [slots[j * tp:(j + 1) * tp] for j in range(engines) if (j + 1) * tp <= len(slots)]


def node_counts(cfg: LauncherConfig) -> tuple[int, int]:
    """(trainer nodes, inference nodes) with the defaults of placement.*_nodes resolved.
    Colocated: both are the trainer's nodes. Async: 1 inference node, the rest train."""
    c, p = cfg.cluster, cfg.placement
    if p.mode is PlacementMode["async"]:
        n_inf = 1 if p.inference_nodes is None else p.inference_nodes
        n_train = max(c.nodes - n_inf, 0) if p.trainer_nodes is None else p.trainer_nodes
        return n_train, n_inf
    n_train = c.nodes if p.trainer_nodes is None else p.trainer_nodes
    return n_train, n_train


def plan_placement(cfg: LauncherConfig, log: Origins) -> PlacementPlan:
    c, p, inf = cfg.cluster, cfg.placement, cfg.inference
    gpn = c.gpus_per_node
    n_train, n_inf = node_counts(cfg)
    if p.mode is PlacementMode["async"]:
        train_nodes = list(range(n_train))
        inf_nodes = list(range(n_train, n_train + n_inf))
        needed = (n_train + n_inf) * gpn
    else:
        train_nodes = inf_nodes = list(range(n_train))
        needed = n_train * gpn
    log.add("placement.trainer_nodes", train_nodes, f"placement.mode={p.mode.value}")
    log.add("placement.inference_nodes", inf_nodes, f"placement.mode={p.mode.value}")
    inf_slots = _slots(tuple(inf_nodes), gpn)
    return PlacementPlan(mode=p.mode.value, trainer_nodes=train_nodes, inference_nodes=inf_nodes,
                         trainer_slots=_slots(tuple(train_nodes), gpn),
                         engine_slots=_engines(inf_slots, inf.engines, inf.tp), gpus_needed=needed,
                         gpu_fraction=SHARED_GPU_FRACTION if p.mode is PlacementMode.colocated else 1.0)
