"""The trainer group and the engine group: Ray actors placed on plan slots, called together.

Every blocking call goes through `_get`, which turns a dead actor into ActorDiedError
naming the actor, its pid and slot, so a crash reads as "trainer rank 1 (pid 4242, node 0
GPU 1) died during train_step" rather than a Ray traceback.
"""
import re

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


class ActorDiedError(RuntimeError):
    """A trainer rank or engine process ended while the run needed it."""


def _options(slot, name: str) -> dict:
    resources = dict(slot.resources)
    options = {"num_cpus": 0, "name": name, "max_restarts": 0,
               "scheduling_strategy": PlacementGroupSchedulingStrategy(slot.placement_group, slot.bundle_index)}
    if "GPU" in resources:
        options["num_gpus"] = resources.pop("GPU")
    options["resources"] = resources
    return options


class _Group:
    role = "actor"

    def __init__(self):
        self.actors, self.labels, self.info = [], [], []

    def _add(self, handle, label: str, slot) -> None:
        self.actors.append(handle)
        self.labels.append(label)
        self.info.append({"role": self.role, "label": label, "node": slot.node, "gpu": slot.gpu, "pid": None})

    def _get(self, refs: list, what: str) -> list:
        out = []
        for ref, label, info in zip(refs, self.labels, self.info, strict=True):
            out.append(get_one(ref, _who(label, info), what))
        return out

    def call(self, method: str, *args) -> list:
        return self._get([getattr(a, method).remote(*args) for a in self.actors], method)

    def wait_ready(self) -> None:
        for info, pid in zip(self.info, self.call("pid"), strict=True):
            info["pid"] = pid


def _who(label: str, info: dict) -> str:
    pid = f"pid {info['pid']}, " if info["pid"] else ""
    return f"{label} ({pid}node {info['node']} GPU {info['gpu']})"


def get_one(ref, who: str, what: str):
    try:
        return ray.get(ref)
    except ray.exceptions.RayActorError as err:
        lines = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip().splitlines() or [type(err).__name__]
        if getattr(err, "actor_init_failed", False):  # the constructor raised: its last line says why
            raise ActorDiedError(f"{who} failed to start: {lines[-1]}") from err
        raise ActorDiedError(f"{who} died during {what}: {lines[0]}") from err


class TrainerGroup(_Group):
    role = "trainer"

    def __init__(self, cls, config, plan, placement):
        super().__init__()
        self.world, self.dp = plan.mesh.world, plan.mesh.dp
        self.model_parallel = plan.mesh.world != plan.mesh.dp or plan.mesh.ep * plan.mesh.etp > 1
        remote_cls = ray.remote(cls)
        for rank, gpu_slot in enumerate(plan.placement.trainer_slots):
            slot = placement.slot(gpu_slot)
            handle = remote_cls.options(**_options(slot, f"trainer-{rank}")).remote(config, rank, self.world)
            self._add(handle, f"trainer rank {rank}", slot)

    def start(self) -> None:
        self.wait_ready()
        addr, port = get_one(self.actors[0].master_address.remote(), "trainer rank 0", "master_address")
        self.call("init_distributed", addr, port)

    def _dp_rank(self, rank: int) -> int:
        return rank // (self.world // self.dp)

    def _per_rank(self, method: str, shards: list) -> list:
        refs = [getattr(a, method).remote(shards[self._dp_rank(r)]) for r, a in enumerate(self.actors)]
        return self._get(refs, method)

    def train_step(self, shards: list) -> list[dict]:
        """Stats of one rank per data-parallel shard (the others repeat them)."""
        results = self._per_rank("train_step", shards)
        ranks_per_dp = self.world // self.dp
        return results[::ranks_per_dp]

    def logprobs(self, shards: list, order: list[int]) -> list[list[float]]:
        results = self._per_rank("logprobs", shards)[:: self.world // self.dp]
        out: list[list[float]] = [[] for _ in order]
        for d, values in enumerate(results):
            for row, lp in zip(order[d:: self.dp], values, strict=True):
                out[row] = lp
        return out

    def export_weights(self, version: int, with_base: bool):
        """ObjectRef of rank 0's WeightUpdate (stays in the object store, fetched by engines).

        With tensor/expert/pipeline parallelism the export gathers shards across ranks, so
        every rank must enter it; the other ranks' results are awaited, never fetched."""
        if not self.model_parallel:
            return self.actors[0].export_weights.remote(version, with_base)
        refs = [actor.export_weights.remote(version, with_base) for actor in self.actors]
        ray.wait(refs[1:], num_returns=len(refs) - 1, fetch_local=False)
        return refs[0]


class EngineGroup(_Group):
    role = "engine"

    def __init__(self, cls, config, plan, placement):
        super().__init__()
        remote_cls = ray.remote(cls)
        for index, gpu_slots in enumerate(plan.placement.engine_slots):
            slot = placement.slot(gpu_slots[0])
            options = _options(slot, f"engine-{index}")
            if len(gpu_slots) > 1:
                options.pop("num_gpus", None)  # a multi-GPU engine's own per-GPU workers claim the GPUs
            handle = remote_cls.options(**options).remote(config, index)
            self._add(handle, f"engine {index}", slot)
        self.least_loaded = config.inference.router.policy.value == "least_loaded"
        self.in_flight = [0] * len(self.actors)
        self._owner: dict = {}

    def __len__(self) -> int:
        return len(self.actors)

    def submit(self, request, chunk_index: int):
        """Send one chunk to an engine chosen by the router policy; returns its ObjectRef."""
        if self.least_loaded:
            engine = min(range(len(self.actors)), key=lambda e: self.in_flight[e])
        else:
            engine = chunk_index % len(self.actors)
        ref = self.actors[engine].generate.remote(request)
        self.in_flight[engine] += 1
        self._owner[ref] = engine
        return ref

    def result(self, ref):
        engine = self._owner.pop(ref)
        self.in_flight[engine] -= 1
        return get_one(ref, _who(self.labels[engine], self.info[engine]), "generate")

    def update_weights(self, update_ref, wait: bool) -> None:
        refs = [a.update_weights.remote(update_ref) for a in self.actors]
        if wait:
            self._get(refs, "update_weights")
