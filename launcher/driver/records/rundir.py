"""The run directory: resolved config, overrides and plan, written before Ray starts.

Written into a temporary sibling and renamed into place, so a failure (or Ctrl-C)
while writing never leaves a half-written run directory behind. A run holds the
directory's lock (`RunDirLock`) from before the first file is written until it exits, so
a second run on the same directory is refused instead of overwriting the first's records.
"""
import datetime
import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import yaml

from launcher.config.compose import Composed
from launcher.secrets import mask_override, mask_secrets


def run_dir_of(composed: Composed, suffix: str = "") -> Path:
    """`<output_dir>/<run.name>`, or a sub-folder per sweep point."""
    run = composed.config.run
    return Path(run.output_dir) / run.name / suffix if suffix else Path(run.output_dir) / run.name


def resolved_yaml(composed: Composed) -> str:
    """The composed config as YAML with secrets masked (what `plan` and `--cfg job` print)."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(composed.cfg, resolve=True, enum_to_str=True)
    return yaml.safe_dump(mask_secrets(plain), sort_keys=False)


def write_run_files(composed: Composed, plan: dict | None, suffix: str = "") -> Path:
    """Write config.yaml, overrides.yaml and plan.json into the run directory, atomically per file set."""
    target = run_dir_of(composed, suffix)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        (staging / "config.yaml").write_text(resolved_yaml(composed))
        overrides = {"choices": composed.choices, "overrides": [mask_override(o) for o in composed.overrides]}
        (staging / "overrides.yaml").write_text(yaml.safe_dump(overrides, sort_keys=False))
        if plan is not None:
            (staging / "plan.json").write_text(json.dumps(mask_secrets(plan), indent=2))
        target.mkdir(exist_ok=True)
        for item in staging.iterdir():
            os.replace(item, target / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


# --- the run-directory lock ----------------------------------------------------------------
# `<run dir>/.lock` holds {host, pid, pid_start, started} of the process that owns the run
# directory and is flock()ed by it for its lifetime: the kernel drops the flock when the holder
# dies, so a free flock with a same-host holder whose pid is gone (or now another process: its
# start time differs) is stale and taken over. A holder on another host cannot be checked from
# here (flock over NFS is not reliable), so it counts as live and the message says how to remove it.

LOCK_NAME = ".lock"


class RunDirLocked(Exception):
    """Another live process holds the run directory; the message names it."""


def _pid_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(holder: dict) -> str:
    return f"pid {holder.get('pid')} on host {holder.get('host')} (started {holder.get('started')})"


def _read_holder(fd: int) -> dict | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    try:
        holder = json.loads(raw)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


def _stale_reason(holder: dict) -> str | None:
    """Why a recorded holder is gone (the lock may be taken over), or None when it may be alive."""
    if holder.get("host") != socket.gethostname():
        return None
    pid = holder.get("pid")
    if not isinstance(pid, int) or not _pid_alive(pid):
        return f"its process {pid} is gone"
    if holder.get("pid_start") is not None and _pid_start(pid) != holder["pid_start"]:
        return f"pid {pid} now belongs to another process (its start time differs)"
    return None


class RunDirLock:
    """Exclusive hold on one run directory: `with RunDirLock(path): write files, launch`."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.fd: int | None = None

    def _open_locked(self) -> tuple[int, bool]:
        """An fd on the current lock file and whether its flock was obtained."""
        import fcntl

        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                got = True
            except BlockingIOError:
                got = False
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd, got
            os.close(fd)  # the holder released (unlinked) it between our open and flock: retry

    def acquire(self) -> "RunDirLock":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd, got = self._open_locked()
        holder = _read_holder(fd)
        if not got:
            os.close(fd)
            who = _describe(holder) if holder else "another process"
            gone = holder and _stale_reason(holder)
            if gone:  # the driver died, a process it forked still has the lock file open
                raise RunDirLocked(f"run directory {self.run_dir} is still locked: its holder {who} has exited "
                                   f"({gone}) but a process it started holds the lock. Stop that process "
                                   f"(`fuser {self.path}` names it) and retry.")
            raise RunDirLocked(f"run directory {self.run_dir} is in use by a live run: {who}. Wait for it to "
                               f"finish, stop it, or pick another run.name / run.output_dir.")
        if holder:
            reason = _stale_reason(holder)
            if reason is None and holder.get("host") == socket.gethostname():
                os.close(fd)
                raise RunDirLocked(f"run directory {self.run_dir} is in use by a live run: {_describe(holder)}.")
            if reason is None:
                os.close(fd)
                raise RunDirLocked(
                    f"run directory {self.run_dir} is held by {_describe(holder)}, which cannot be checked from "
                    f"{socket.gethostname()}. If no launcher runs there any more, remove {self.path} and retry.")
            sys.stderr.write(f"taking over the stale lock of {self.run_dir} from {_describe(holder)}: {reason}\n")
        me = {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": _pid_start(os.getpid()),
              "started": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(me).encode())
        os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.path)  # before closing: whoever opens it next finds a new inode
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "RunDirLock":
        return self if self.fd is not None else self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
