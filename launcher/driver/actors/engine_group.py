"""The engine group: one Ray actor per inference engine; chunks submitted by the router policy
and collected as they finish (a hang named by each engine's last progress), and the streamed
weight update's calls, queued behind whatever an engine is generating."""
import time

import ray

from launcher.config.schema.choices import RouterPolicy
from launcher.contract.spec import ActorSpec
from launcher.driver.actors.actor_group import ActorGroup, actor_options, remote_with_secrets
from launcher.driver.actors.deadlines import TRANSFER_STEP, CallDeadlines
from launcher.driver.actors.errors import HangError, get_one, who_is
from launcher.weight_sync.messages import EngineWait

IN_FLIGHT_GROUP = "in_flight"
"""The Ray concurrency group (its own thread) of in-flight generate calls; every other call
of an engine (weight updates, held-out evaluation) runs in order on the default one."""


class EngineGroup(ActorGroup):
    role = "engine"

    def __init__(self, cls, config, plan, placement, board=None):
        """board: as TrainerGroup's. With in-flight updates (plan.loop) an engine runs
        GenerationRequest.in_flight chunks on a thread of their own, so a weight update reaches
        it mid-chunk (weight_sync/update_gate.py pauses the chunk at a token boundary)."""
        super().__init__(CallDeadlines.of_run(config, plan))
        threads = {"concurrency_groups": {IN_FLIGHT_GROUP: 1}} if plan.loop.in_flight_updates else {}
        remote_cls, secrets = remote_with_secrets(cls, **threads)
        for index, gpu_slots in enumerate(plan.placement.engine_slots):
            slot = placement.slot(gpu_slots[0])
            options = actor_options(slot, f"engine-{index}")
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
        """A dropped step's chunks (driver/loop/preemption.py): those still queued on an engine are
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
            whos = [who_is(self.labels[e], self.info[e]) for e in late]
            raise HangError(self._generate_deadline(late[0]).missed(whos, "generate", now - self._progress_at[late[0]]))
        return min(due.values())

    def _generate_deadline(self, engine: int):
        return self.deadlines.of("generate", first=(engine, "generate") not in self._answered)

    def result(self, ref):
        """The Generation of one submitted chunk (waiting for it as wait_done does)."""
        self.wait_done([ref])
        engine = self._owner.pop(ref)
        self.in_flight[engine] -= 1
        out = get_one(ref, who_is(self.labels[engine], self.info[engine]), "generate")
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
        return EngineWait([who_is(label, info) for label, info in zip(self.labels, self.info, strict=True)],
                          deadline.seconds, deadline.basis)

    def transfer_done(self) -> None:
        """A transfer reached every engine: later ones have the steady-state deadline."""
        self._answered.update((i, TRANSFER_STEP) for i in range(len(self.actors)))
