"""Placement groups from the plan: one STRICT_PACK group per node, one bundle per GPU.

Colocated: trainer rank i and the engine on the same GPU take half of that GPU's bundle
each (fractional resource), so they share the device as they would on a cluster. Async:
trainer and engines sit on disjoint nodes and take whole bundles.

On a real cluster (remote mode) every logical node is pinned to a Ray node of its own.
Before any group is asked for, `preflight` compares what the groups need with the live
cluster's nodes (`ray.nodes()`: GPUs and custom resources per node), so a plan the
cluster cannot hold fails in a second with both sides listed, not after a placement wait.
"""
from dataclasses import dataclass

from launcher.driver.actors.cluster import node_resource

NODE_ID_LABEL = "ray.io/node-id"
"""The label Ray gives every node (its id): a bundle selecting it lands on that node."""


@dataclass
class Slot:
    """Where one actor goes: its placement group, bundle, and the resources it asks for."""

    placement_group: object
    bundle_index: int
    resources: dict[str, float]
    node: int
    gpu: int


class PlacementError(RuntimeError):
    """The cluster cannot hold the plan's node groups (checked before asking Ray for them)."""


def node_bundles(plan_placement, gpus_per_node: int, gpu_res: str, embedded: bool) -> dict[int, list[dict]]:
    """Logical node -> its bundles (one per GPU), each group packed on one Ray node."""
    nodes = sorted({s.node for s in plan_placement.trainer_slots}
                   | {s.node for slots in plan_placement.engine_slots for s in slots})
    out = {}
    for node in nodes:
        bundle = {gpu_res: 1.0}
        if embedded:
            bundle[node_resource(node)] = 1.0
        out[node] = [dict(bundle) for _ in range(gpus_per_node)]
    return out


def _need(bundles: list[dict]) -> dict[str, float]:
    total: dict[str, float] = {}
    for bundle in bundles:
        for res, amount in bundle.items():
            total[res] = total.get(res, 0.0) + amount
    return total


def _fmt(resources: dict[str, float]) -> str:
    return ", ".join(f"{r} {v:g}" for r, v in sorted(resources.items())) or "nothing"


def _node_line(node: dict, keys: set[str]) -> str:
    res = {r: v for r, v in node["Resources"].items() if r in keys or r in ("GPU", "CPU")}
    return f"{node.get('NodeManagerAddress', '?')} (node {node['NodeID'][:8]}): {_fmt(res)}"


def preflight(groups: dict[int, list[dict]], ray_nodes: list[dict], where: str,
              distinct: bool = False) -> dict[int, dict]:
    """Logical node -> the alive Ray node (a `ray.nodes()` row) its group fits on whole,
    taking each node's total resources once (first fit, largest groups first); with
    `distinct` every logical node gets a Ray node of its own (a logical node is a machine).
    Raises PlacementError, listing both sides, when some group fits nowhere."""
    alive = [n for n in ray_nodes if n.get("Alive")]
    free = [dict(n["Resources"]) for n in alive]
    taken: set[int] = set()
    needs = {node: _need(bundles) for node, bundles in groups.items()}
    hosts, unplaced = {}, []
    for node, need in sorted(needs.items(), key=lambda kv: -sum(kv[1].values())):
        host = next((i for i, res in enumerate(free) if not (distinct and i in taken)
                     and all(res.get(r, 0.0) >= v for r, v in need.items())), None)
        if host is None:
            unplaced.append(node)
            continue
        taken.add(host)
        hosts[node] = alive[host]
        for r, v in need.items():
            free[host][r] -= v
    if not unplaced:
        return hosts
    keys = {r for need in needs.values() for r in need}
    wanted = "; ".join(f"logical node {n}: {_fmt(need)}" for n, need in sorted(needs.items()))
    have = "; ".join(_node_line(n, keys) for n in alive) or "no alive node"
    each = "each on a Ray node of its own" if distinct else "each packed on one Ray node"
    raise PlacementError(
        f"{where} cannot hold the plan: {len(needs)} node group(s), {each}, are needed "
        f"({wanted}); {len(unplaced)} of them fit on no node. The cluster has {len(alive)} alive node(s): {have}. "
        "Fix: set cluster.nodes and cluster.gpus_per_node to what the cluster has (or a smaller mesh / fewer "
        "engines), or add nodes to the cluster.")


class Placement:
    def __init__(self, plan_placement, gpus_per_node: int, gpu_res: str, embedded: bool, where: str = "Ray"):
        import ray
        from ray.util.placement_group import placement_group

        groups = node_bundles(plan_placement, gpus_per_node, gpu_res, embedded)
        # On a real cluster each logical node is pinned to the distinct Ray node the
        # preflight chose, so async trainer and engine groups never share a machine however
        # many GPUs it has. Embedded: one machine, logical nodes told apart by node_<i>.
        hosts = preflight(groups, ray.nodes(), where, distinct=not embedded)
        self._groups = {}
        for node, bundles in groups.items():
            pin = None if embedded else [{NODE_ID_LABEL: hosts[node]["NodeID"]} for _ in bundles]
            self._groups[node] = placement_group(bundles, strategy="STRICT_PACK", name=f"node{node}",
                                                 bundle_label_selector=pin)
        self.gpu_res = gpu_res
        self.fraction = plan_placement.gpu_fraction

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
