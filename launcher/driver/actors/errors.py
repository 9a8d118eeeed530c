"""How a lost actor is reported: a dead actor becomes ActorDiedError naming the actor, its pid
and slot, so a crash reads as "trainer rank 1 (pid 4242, node 0 GPU 1) died during train_step"
rather than a Ray traceback; one that answers nothing within its call's deadline HangError;
a CUDA out-of-memory GpuMemoryError with torch's own figures. When one actor's call fails,
a peer that died is the likelier cause (a killed rank breaks its peers' collectives), so its
death is reported instead."""
import re

import ray

from launcher.contract.errors import PeerLostError


class ActorDiedError(RuntimeError):
    """A trainer rank or engine process ended while the run needed it."""


class GpuMemoryError(ActorDiedError):
    """An actor's call ran out of GPU memory: the run cannot go on (exit 3) and it is no bug of
    the launcher's, so no traceback: the message has torch's own figures."""


class HangError(ActorDiedError):
    """An actor answered nothing within its call's deadline: as lost to the run as a dead one
    (same exit 3, same teardown), but alive, so Ray would never have said so."""


def who_is(label: str, info: dict) -> str:
    pid = f"pid {info['pid']}, " if info["pid"] else ""
    return f"{label} ({pid}node {info['node']} GPU {info['gpu']})"


PEER_DEATH_GRACE_S = 10.0
"""How long a failed call waits for its peers' calls to show a death: Ray notices a killed
process within a second or two, while its peers' collectives fail at once."""


def raise_dead_peer(refs: list, whos: list[str], what: str, cause: Exception) -> None:
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
