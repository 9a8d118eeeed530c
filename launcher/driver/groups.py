"""The trainer group and the engine group: Ray actors placed on plan slots, called together.

Every blocking call goes through `_get` (engines' chunks: `wait_done`), which turns a dead
actor into ActorDiedError naming the actor, its pid and slot, so a crash reads as "trainer
rank 1 (pid 4242, node 0 GPU 1) died during train_step" rather than a Ray traceback, and
an actor that answers nothing within its call's deadline (deadlines.py) into HangError:
"engine 0 (pid 4243, node 0 GPU 1) did not answer generate within 130 s (deadline: ...)".
"""
import os
import re
import time

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from launcher.config.schema.choices import RouterPolicy
from launcher.contract.errors import PeerLostError
from launcher.contract.spec import ActorSpec
from launcher.driver.cluster import secret_worker_env
from launcher.driver.deadlines import TRANSFER_STEP, CallDeadlines
from launcher.driver.startup import FINAL_WAIT_S, POLL_S, StartupView
from launcher.plan.sync import SyncTransport
from launcher.weight_sync.messages import EngineWait


class ActorDiedError(RuntimeError):
    """A trainer rank or engine process ended while the run needed it."""


class GpuMemoryError(ActorDiedError):
    """An actor's call ran out of GPU memory: the run cannot go on (exit 3) and it is no bug of
    the launcher's, so no traceback: the message has torch's own figures."""


class HangError(ActorDiedError):
    """An actor answered nothing within its call's deadline: as lost to the run as a dead one
    (same exit 3, same teardown), but alive, so Ray would never have said so."""


def _remote_with_secrets(cls, **remote_options):
    """ray.remote of `cls` (with `remote_options`) whose constructor first sets the session's
    secret variables in os.environ (before the backend starts anything that reads them, such
    as vLLM's workers, which inherit it). Returns (remote class, extra leading constructor args)."""

    class WithSecretEnv(cls):
        def __init__(self, secret_env: dict[str, str], *args, **kwargs):
            os.environ.update(secret_env)
            super().__init__(*args, **kwargs)

    WithSecretEnv.__name__, WithSecretEnv.__qualname__ = cls.__name__, cls.__qualname__
    WithSecretEnv.__doc__ = cls.__doc__
    remote = ray.remote(**remote_options) if remote_options else ray.remote
    return remote(WithSecretEnv), (secret_worker_env(),)


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

    def __init__(self, deadlines: CallDeadlines | None = None):
        self.actors, self.labels, self.info = [], [], []
        self.deadlines = deadlines or CallDeadlines()
        self._answered: set[tuple[int, str]] = set()
        """(actor index, method) of every call answered once: later calls have the steady-state deadline."""
        self.view: StartupView | None = None
        """While the run starts: the start-up board, drawn while a call is waited on (startup.py)."""

    def _add(self, handle, label: str, slot) -> None:
        self.actors.append(handle)
        self.labels.append(label)
        self.info.append({"role": self.role, "label": label, "node": slot.node, "gpu": slot.gpu, "pid": None,
                          "ray_node_id": None, "host": None, "ip": None})

    def _get(self, refs: list, what: str) -> list:
        """Results of one call per actor (or per actor of a prefix: trainer rank 0 alone), in
        the order they finish; HangError naming those that have not answered by the deadline.

        When one actor's call fails, a peer that died is the likelier cause (a killed rank
        breaks its peers' collectives), so its death is reported instead of their errors."""
        whos = [_who(label, info) for label, info in zip(self.labels[:len(refs)], self.info[:len(refs)], strict=True)]
        index = {ref: i for i, ref in enumerate(refs)}
        deadline = self.deadlines.of(what, first=any((i, what) not in self._answered for i in range(len(refs))))
        started, out, pending = time.monotonic(), {}, list(refs)
        while pending:
            left = deadline.seconds - (time.monotonic() - started)
            wait_s = max(left, 0.0) if self.view is None else min(max(left, 0.0), POLL_S)
            ready, pending = ray.wait(pending, num_returns=1, timeout=wait_s)
            if not ready and left > wait_s:
                self.view.poll()
                continue
            if not ready:
                raise HangError(self._missed(deadline, [index[ref] for ref in pending], what, started))
            i = index[ready[0]]
            try:
                out[i] = get_one(ready[0], whos[i], what)
            except ActorDiedError:
                raise
            except Exception as err:
                _raise_dead_peer(refs[:i] + refs[i + 1:], whos[:i] + whos[i + 1:], what, err)
                raise
        self._answered.update((i, what) for i in range(len(refs)))
        return [out[i] for i in range(len(refs))]

    def _missed(self, deadline, late: list[int], what: str, started: float) -> str:
        """The HangError's message; during start-up each late actor's phase is named."""
        message = deadline.missed([_who(self.labels[i], self.info[i]) for i in late], what, time.monotonic() - started)
        if self.view is None:
            return message
        self.view.refresh(wait_s=FINAL_WAIT_S)
        return message + "; " + "; ".join(f"{self.labels[i]} was {self.view.phase_of(self.labels[i])}" for i in late)

    def call(self, method: str, *args) -> list:
        return self._get([getattr(a, method).remote(*args) for a in self.actors], method)

    def answered_within(self, method: str, timeout_s: float) -> list | None:
        """`call` for a run that is ending: the results, or None when an actor is dead, failed
        or busy past timeout_s (a call queues behind the one the driver stopped waiting for)."""
        refs = [getattr(a, method).remote() for a in self.actors]
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=max(timeout_s, 0.0))
        if pending:
            return None
        try:
            return ray.get(refs)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
            return None

    def wait_ready(self) -> None:
        for info, pid in zip(self.info, self.call("pid"), strict=True):
            info["pid"] = pid
        where = self._get([a.__ray_call__.remote(_ray_node) for a in self.actors], "ray_node")
        for info, (node_id, host, ip) in zip(self.info, where, strict=True):
            info["ray_node_id"], info["host"], info["ip"] = node_id, host, ip


def _ray_node(actor_self) -> tuple[str, str, str]:
    """Runs inside an actor (Ray's __ray_call__): (Ray node id, host name, IP) of its process."""
    import socket

    return ray.get_runtime_context().get_node_id(), socket.gethostname(), ray.util.get_node_ip_address()


def _who(label: str, info: dict) -> str:
    pid = f"pid {info['pid']}, " if info["pid"] else ""
    return f"{label} ({pid}node {info['node']} GPU {info['gpu']})"


PEER_DEATH_GRACE_S = 10.0
"""How long a failed call waits for its peers' calls to show a death: Ray notices a killed
process within a second or two, while its peers' collectives fail at once."""


def _raise_dead_peer(refs: list, whos: list[str], what: str, cause: Exception) -> None:
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=PEER_DEATH_GRACE_S) if refs else ([], [])
    for ref, who in zip(refs, whos, strict=True):
        if ref not in ready:
            continue
        try:
            get_one(ref, who, what)
        except ActorDiedError as died:
            raise died from cause
        except Exception:  # noqa: BLE001, S112 - a peer's own failure: the first one is reported
            continue


def get_one(ref, who: str, what: str):
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        if isinstance(err.cause, PeerLostError):  # the actor this one waited on is the one lost: its name
            raise ActorDiedError(f"{who}, during {what}: {err.cause}") from err
        if type(err.cause).__name__ == "OutOfMemoryError":  # torch's CUDA OOM: a resource, not a bug
            raise GpuMemoryError(f"{who} ran out of GPU memory during {what}: {str(err.cause).splitlines()[0]} "
                                 "Compare the phase's peak in `launcher plan` (a process outside the run "
                                 "holding memory shows in the line above)") from err
        raise
    except ray.exceptions.RayActorError as err:
        lines = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip().splitlines() or [type(err).__name__]
        if getattr(err, "actor_init_failed", False):  # the constructor raised: its last line says why
            raise ActorDiedError(f"{who} failed to start: {lines[-1]}") from err
        raise ActorDiedError(f"{who} died during {what}: {lines[0]}") from err


class TrainerGroup(_Group):
    role = "trainer"

    def __init__(self, cls, config, plan, placement, board=None):
        """board: the run's StartupBoard, handed to every rank (startup.py); None: no start-up progress."""
        super().__init__(CallDeadlines.of_run(config, plan))
        self.world, self.dp = plan.mesh.world, plan.mesh.dp
        self.model_parallel = plan.mesh.world != plan.mesh.dp or plan.mesh.ep * plan.mesh.etp > 1
        self.transport = plan.sync.transport
        """How weights reach the engines (plan/sync.py sync_transport): weight_sync/push.py picks its plug-in."""
        self._transfer_connected = False
        remote_cls, secrets = _remote_with_secrets(cls)
        for rank, gpu_slot in enumerate(plan.placement.trainer_slots):
            slot = placement.slot(gpu_slot)
            spec = ActorSpec(config, plan, rank, self.world, board)
            handle = remote_cls.options(**_options(slot, f"trainer-{rank}")).remote(*secrets, spec)
            self._add(handle, f"trainer rank {rank}", slot)

    def start(self) -> None:
        self.wait_ready()
        addr, port = self._get([self.actors[0].master_address.remote()], "master_address")[0]
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

    def _exporters(self) -> list:
        """Ranks that run the weight export: rank 0 alone, or with tensor/expert/pipeline
        parallelism every rank (each tensor is gathered across ranks; only rank 0 keeps it)."""
        return self.actors if self.model_parallel else self.actors[:1]

    def begin_export(self, version: int, with_base: bool, max_bucket_bytes: int,
                     transport: SyncTransport = SyncTransport.host):
        """Start the streamed export of policy `version`; returns the ObjectRef of rank 0's
        WeightUpdate header, passed on to the engines unread: a failed begin surfaces through
        the engines' begin_weight_update (which takes it) and through next_bucket. `transport`
        cuda_ipc: rank 0's buckets are handles of its device buffers (the engines' GPU)."""
        refs = [a.begin_export.remote(version, with_base, max_bucket_bytes, transport) for a in self._exporters()]
        return refs[0]

    def release_export(self) -> None:
        """Every engine finished the update: rank 0 frees the device buffers it kept for it."""
        self._get([self.actors[0].release_export.remote()], "release_export")

    def next_bucket(self) -> tuple:
        """(BucketInfo, ObjectRef of rank 0's WeightBucket), or (None, None) after the last.

        The bucket stays in the object store for the engines; the driver reads only the
        info. Every exporting rank takes the step (their gathers are collectives)."""
        pairs = [a.next_bucket.options(num_returns=2).remote() for a in self._exporters()]
        infos = self._get([info for info, _ in pairs], "next_bucket")
        if any(info != infos[0] for info in infos):
            raise RuntimeError(f"trainer ranks disagree on a weight-export bucket ({infos}): their weight "
                               "streams must gather the same tensors in the same order")
        return infos[0], pairs[0][1]

    def fetch(self, ref, what: str):
        """The value of rank 0's `ref` (an export header or bucket, which only `export` reads on
        the driver), waited on as every call of the group is: within `what`'s deadline, a
        dead rank 0 named."""
        return self._get([ref], what)[0]

    def connect_weight_transfer(self, engines) -> None:
        """GPU engines: build the trainer side of their transfer on every rank, once."""
        if self._transfer_connected:
            return
        addr, port = self._get([self.actors[0].master_address.remote()], "master_address")[0]
        self.call("connect_weight_transfer", engines.actors, addr, port, engines.transfer_wait())
        self._transfer_connected = True

    def send_weights(self, version: int, engines) -> None:
        """Rank 0 drives the engines' transfer steps itself, each bounded by the wait handed
        down; this call's own deadline is that much longer (deadlines.HANDED_DOWN_GRACE_S), so
        a lost engine is named by rank 0's wait rather than rank 0 by the driver's."""
        self.call("send_weights", version, engines.transfer_wait())
        engines.transfer_done()


IN_FLIGHT_GROUP = "in_flight"
"""The Ray concurrency group (its own thread) of in-flight generate calls; every other call
of an engine (weight updates, held-out evaluation) runs in order on the default one."""


class EngineGroup(_Group):
    role = "engine"

    def __init__(self, cls, config, plan, placement, board=None):
        """board: as TrainerGroup's. With in-flight updates (plan.loop) an engine runs
        GenerationRequest.in_flight chunks on a thread of their own, so a weight update reaches
        it mid-chunk (weight_sync/update_gate.py pauses the chunk at a token boundary)."""
        super().__init__(CallDeadlines.of_run(config, plan))
        threads = {"concurrency_groups": {IN_FLIGHT_GROUP: 1}} if plan.loop.in_flight_updates else {}
        remote_cls, secrets = _remote_with_secrets(cls, **threads)
        for index, gpu_slots in enumerate(plan.placement.engine_slots):
            slot = placement.slot(gpu_slots[0])
            options = _options(slot, f"engine-{index}")
            if len(gpu_slots) > 1:
                options.pop("num_gpus", None)  # a multi-GPU engine's own per-GPU workers claim the GPUs
            handle = remote_cls.options(**options).remote(*secrets, ActorSpec(config, plan, index, board=board))
            self._add(handle, f"engine {index}", slot)
        self.least_loaded = config.inference.router.policy is RouterPolicy.least_loaded
        self.in_flight = [0] * len(self.actors)
        self._progress_at = [0.0] * len(self.actors)
        """When each busy engine last finished a chunk (or, idle before, was given one): monotonic s."""
        self._owner: dict = {}

    def __len__(self) -> int:
        return len(self.actors)

    def submit(self, request, chunk_index: int):
        """Send one chunk to an engine chosen by the router policy; returns its ObjectRef."""
        if self.least_loaded:
            engine = min(range(len(self.actors)), key=lambda e: self.in_flight[e])
        else:
            engine = chunk_index % len(self.actors)
        return self.submit_to(engine, request)

    def submit_to(self, engine: int, request):
        """Send one request to engine `engine` (the rollout canary asks each one); returns its ObjectRef."""
        generate = self.actors[engine].generate
        ref = (generate.options(concurrency_group=IN_FLIGHT_GROUP) if request.in_flight else generate).remote(request)
        if self.in_flight[engine] == 0:
            self._progress_at[engine] = time.monotonic()
        self.in_flight[engine] += 1
        self._owner[ref] = engine
        return ref

    def cancel_in_flight(self) -> None:
        """A dropped step's chunks (driver/preemption.py): those still queued on an engine are
        cancelled (Ray's cancel of an actor task that has not started), so each engine has only
        the chunk it is generating left to finish before the next call."""
        for ref, engine in self._owner.items():
            ray.cancel(ref)
            self.in_flight[engine] -= 1
        self._owner.clear()

    def wait_done(self, refs: list, timeout_s: float | None = None) -> list:
        """The chunks among `refs` (from submit) that are done, like ray.wait: at least one, or
        with timeout_s whatever finished within it. HangError when an engine holding one of
        them has finished no chunk for its generate deadline: queued chunks wait their turn,
        so the clock runs from its last finished chunk, not from each submission."""
        stop = None if timeout_s is None else time.monotonic() + timeout_s
        wait_s = 0.0  # first what is done already: the driver may have been busy elsewhere for long
        while True:
            ready, _ = ray.wait(refs, num_returns=1 if stop is None else len(refs), timeout=wait_s)
            now = time.monotonic()
            for ref in ready:
                self._progress_at[self._owner[ref]] = now
            if ready or (stop is not None and now >= stop):
                return ready
            due_at = self._raise_if_late({self._owner[r] for r in refs}, now)
            wait_s = max((due_at if stop is None else min(due_at, stop)) - now, 0.0)

    def _raise_if_late(self, engines: set[int], now: float) -> float:
        """HangError naming the engines past their generate deadline; else when the first one is due."""
        due = {e: self._progress_at[e] + self._generate_deadline(e).seconds for e in engines}
        if late := sorted(e for e, at in due.items() if at <= now):
            whos = [_who(self.labels[e], self.info[e]) for e in late]
            raise HangError(self._generate_deadline(late[0]).missed(whos, "generate", now - self._progress_at[late[0]]))
        return min(due.values())

    def _generate_deadline(self, engine: int):
        return self.deadlines.of("generate", first=(engine, "generate") not in self._answered)

    def result(self, ref):
        """The Generation of one submitted chunk (waiting for it as wait_done does)."""
        self.wait_done([ref])
        engine = self._owner.pop(ref)
        self.in_flight[engine] -= 1
        out = get_one(ref, _who(self.labels[engine], self.info[engine]), "generate")
        self._answered.add((engine, "generate"))
        return out

    # A streamed weight update (launcher/weight_sync/pump.py): each returns one ObjectRef per
    # engine, in submission order behind whatever the engine is generating.

    def begin_weight_update(self, update) -> list:
        return [a.begin_weight_update.remote(update) for a in self.actors]

    def load_weight_bucket(self, bucket_ref) -> list:
        return [a.load_weight_bucket.remote(bucket_ref) for a in self.actors]

    def finish_weight_update(self, version: int) -> list:
        return [a.finish_weight_update.remote(version) for a in self.actors]

    def wait(self, refs: list, what: str) -> list:
        return self._get(refs, what)

    def transfer_wait(self) -> EngineWait:
        """The bound on one step of a GPU weight transfer, which trainer rank 0 waits on itself
        (weight_sync/transports/vllm_engine.py EngineGroupClient), and these engines' names for its error."""
        first = any((i, TRANSFER_STEP) not in self._answered for i in range(len(self.actors)))
        deadline = self.deadlines.of(TRANSFER_STEP, first)
        return EngineWait([_who(label, info) for label, info in zip(self.labels, self.info, strict=True)],
                          deadline.seconds, deadline.basis)

    def transfer_done(self) -> None:
        """A transfer reached every engine: later ones have the steady-state deadline."""
        self._answered.update((i, TRANSFER_STEP) for i in range(len(self.actors)))
