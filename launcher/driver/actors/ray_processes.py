"""The embedded Ray's processes: stopped when its start-up is interrupted, and recorded so
that the next run cleans up after a driver that was SIGKILLed.

ray.init first installs its own SIGTERM handler (`sys.exit(15)`), so a SIGTERM while Ray
starts ended the driver from wherever ray.init was: status 15, nothing printed, and what
it had started left to chance. `interruptible_start` turns that (and Ctrl-C, and the
launcher's other stop signals) into RayStartInterrupted once everything Ray had started is
stopped, and gives the launcher's own SIGTERM handler back afterwards.

A SIGKILLed driver takes its gcs_server and raylet along (Ray makes them die with their
parent) but not the raylet's dashboard and runtime-env agents, which lingered about a
minute (measured on tiny_grpo). So every embedded session records its driver and its Ray
processes (pid and start time: a reused pid never matches) under Ray's temp dir, and the
next embedded start kills the processes of every record whose driver is gone. Only
processes of the launcher's own embedded Ray are ever recorded, so a cluster a user
brought up with `ray start` is never touched.
"""
import contextlib
import json
import os
import signal
from pathlib import Path

STOP_GRACE_S = 3.0
"""How long a SIGTERMed Ray process may take to exit before it is SIGKILLed."""


class RayStartInterrupted(KeyboardInterrupt):
    """SIGTERM, another stop signal or Ctrl-C while ray.init ran; everything it had started is
    stopped. `signum`: the signal (the exit code is 128 + it)."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


def records_dir() -> Path:
    from ray._common.utils import get_default_ray_temp_dir

    return Path(get_default_ray_temp_dir()) / "launcher_embedded"


def _ray_descendants() -> list:
    """This process's descendants that Ray started: run from Ray's package (daemons, reaper, a
    starting agent or worker) or named `ray::...` (what agents and workers retitle themselves)."""
    import psutil
    import ray

    ray_dir = os.path.dirname(ray.__file__)
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            cmdline = child.cmdline()
            if any(ray_dir in part for part in cmdline) or (cmdline and cmdline[0].startswith("ray::")):
                found.append(child)
    return found


def _stop(processes: list) -> None:
    import psutil

    for proc in processes:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(processes, timeout=STOP_GRACE_S)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=STOP_GRACE_S)


@contextlib.contextmanager
def interruptible_start():
    """Around ray.init: SIGTERM or Ctrl-C stops Ray and what it started, then raises
    RayStartInterrupted; on the way out a Python SIGTERM handler from before ray.init is back."""
    import ray

    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    except (KeyboardInterrupt, SystemExit) as err:
        if isinstance(err, SystemExit) and err.code != signal.SIGTERM:
            raise
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
        with contextlib.suppress(Exception):
            ray.shutdown()
        _stop(_ray_descendants())
        signum = signal.SIGTERM if isinstance(err, SystemExit) else getattr(err, "signum", signal.SIGINT)
        raise RayStartInterrupted(f"interrupted during Ray start-up ({signal.Signals(signum).name}); Ray stopped",
                                  signum) from None
    finally:
        if callable(previous):  # the launcher's own; otherwise Ray's (sys.exit, then its atexit shutdown) stays
            signal.signal(signal.SIGTERM, previous)


def _identity(proc) -> dict:
    return {"pid": proc.pid, "create_time": proc.create_time(), "name": proc.name()}


def record_session() -> Path:
    """Write this driver's record: itself and the Ray processes it started (call after ray.init)."""
    import psutil

    path = records_dir() / f"{os.getpid()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"driver": _identity(psutil.Process()), "processes": [_identity(p) for p in _ray_descendants()]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)
    return path


def _alive(identity: dict):
    """The process of a record's entry if it still runs (same pid, same start time), else None."""
    import psutil

    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(identity["pid"])
        if abs(proc.create_time() - identity["create_time"]) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    return None


def reap_dead_sessions() -> list[str]:
    """Kill the recorded Ray processes of every embedded session whose driver is gone; what was killed."""
    killed = []
    for path in sorted(records_dir().glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):  # another start is writing or removing it
            continue
        if _alive(record["driver"]) is not None:
            continue
        leftovers = [p for p in map(_alive, record["processes"]) if p is not None]
        killed += [f"{entry['name']} pid {entry['pid']}" for entry in record["processes"] if _alive(entry)]
        _stop(leftovers)
        path.unlink(missing_ok=True)
    return killed
