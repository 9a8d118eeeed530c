"""What both actor groups share: Ray actors placed on plan slots, created with the session's
secrets, called together. Every blocking call goes through `_get` (engines' chunks:
EngineGroup.wait_done), which names a dead actor (errors.py) and one that answers nothing
within its call's deadline (deadlines.py): "engine 0 (pid 4243, node 0 GPU 1) did not answer
generate within 130 s (deadline: ...)"."""
import os
import time

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from launcher.driver.actors.cluster import secret_worker_env
from launcher.driver.actors.deadlines import CallDeadlines
from launcher.driver.actors.errors import ActorDiedError, HangError, get_one, raise_dead_peer, who_is
from launcher.driver.actors.startup import FINAL_WAIT_S, POLL_S, StartupView


def remote_with_secrets(cls, **remote_options):
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


def actor_options(slot, name: str) -> dict:
    resources = dict(slot.resources)
    options = {"num_cpus": 0, "name": name, "max_restarts": 0,
               "scheduling_strategy": PlacementGroupSchedulingStrategy(slot.placement_group, slot.bundle_index)}
    if "GPU" in resources:
        options["num_gpus"] = resources.pop("GPU")
    options["resources"] = resources
    return options


class ActorGroup:
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
        whos = [who_is(label, info) for label, info in zip(self.labels[:len(refs)], self.info[:len(refs)], strict=True)]
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
                raise_dead_peer(refs[:i] + refs[i + 1:], whos[:i] + whos[i + 1:], what, err)
                raise
        self._answered.update((i, what) for i in range(len(refs)))
        return [out[i] for i in range(len(refs))]

    def _missed(self, deadline, late: list[int], what: str, started: float) -> str:
        """The HangError's message; during start-up each late actor's phase is named."""
        message = deadline.missed([who_is(self.labels[i], self.info[i]) for i in late], what, time.monotonic() - started)
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
