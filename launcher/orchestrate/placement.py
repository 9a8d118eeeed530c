"""Placement groups from the plan: one STRICT_PACK group per node, one bundle per GPU.

Colocated: trainer rank i and the engine on the same GPU take half of that GPU's bundle
each (fractional resource), so they share the device as they would on a cluster. Async:
trainer and engines sit on disjoint nodes and take whole bundles.
"""
from dataclasses import dataclass

from launcher.orchestrate.cluster import node_resource

SHARED_GPU_FRACTION = 0.5


@dataclass
class Slot:
    """Where one actor goes: its placement group, bundle, and the resources it asks for."""

    placement_group: object
    bundle_index: int
    resources: dict[str, float]
    node: int
    gpu: int


class Placement:
    def __init__(self, plan_placement, gpus_per_node: int, gpu_res: str, embedded: bool):
        from ray.util.placement_group import placement_group

        nodes = sorted({s.node for s in plan_placement.trainer_slots}
                       | {s.node for slots in plan_placement.engine_slots for s in slots})
        self._groups = {}
        for node in nodes:
            bundle = {gpu_res: 1.0}
            if embedded:
                bundle[node_resource(node)] = 1.0
            self._groups[node] = placement_group([dict(bundle) for _ in range(gpus_per_node)],
                                                 strategy="STRICT_PACK", name=f"node{node}")
        self.gpu_res = gpu_res
        self.fraction = SHARED_GPU_FRACTION if plan_placement.mode == "colocated" else 1.0

    def ready(self, timeout_s: float) -> None:
        import ray

        pending = [pg.ready() for pg in self._groups.values()]
        done, _ = ray.wait(pending, num_returns=len(pending), timeout=timeout_s)
        if len(done) < len(pending):
            raise RuntimeError(
                f"Ray could not place {len(pending)} node group(s) within {timeout_s:.0f} s: the cluster lacks the "
                f"GPUs/nodes the plan needs (resources now: {ray.available_resources()})")

    def slot(self, gpu_slot) -> Slot:
        return Slot(self._groups[gpu_slot.node], gpu_slot.gpu, {self.gpu_res: self.fraction},
                    gpu_slot.node, gpu_slot.gpu)

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for pg in self._groups.values():
            remove_placement_group(pg)
