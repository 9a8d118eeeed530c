"""Running a model's Python in a child process, so that no tool call can hang, flood or crash the driver.

    result = run_python("print(6 * 7)", timeout_s=10)     # SandboxResult(ok=True, output="42\\n", ...)

What the child gets:
- A fresh interpreter, `sys.executable -I -S -u -X utf8 -c PRELUDE`: isolated (no PYTHON*
  variables, no user site, the working directory not on sys.path) and without site-packages, so
  the code sees the standard library only. Its environment is PATH, HOME, TMPDIR and LANG
  (HOME and TMPDIR are its folder): none of the driver's variables (tokens, keys) reach it.
  Unbuffered, so what it printed before a timeout is still shown.
- Its own temporary folder as working directory (the code is main.py there), removed afterwards.
- Resource limits, set by the prelude before the code runs: RLIMIT_AS (memory_mb of address
  space: a big allocation raises MemoryError), RLIMIT_CPU (a second above the timeout, for
  threads that burn CPU faster than the wall clock), RLIMIT_FSIZE (FILE_LIMIT_MB per file),
  RLIMIT_CORE 0, and, unless the driver runs as root (root is not held by RLIMIT_NPROC),
  RLIMIT_NPROC at NPROC_MARGIN tasks over what the user already runs (a fork bomb stops there).
  A limit that cannot be set is skipped. They are set in the child rather than in Popen's
  preexec_fn: the driver steps envs on threads, where preexec_fn is documented unsafe (the
  forked child can deadlock on a lock another thread held), and it would make Popen fork the
  whole driver process instead of vfork'ing.
- No network, as an in-process guard only: the prelude replaces socket.socket's connect,
  connect_ex, bind, sendto and sendmsg, and socket.create_connection, create_server,
  getaddrinfo and gethostbyname*, with functions raising PermissionError(NETWORK_DISABLED).
  urllib, http.client, asyncio and ssl all go through these. It is not a kernel network
  namespace (no unshare or CAP_NET_ADMIN privilege is assumed on the cluster): code that
  imports _socket, loads ctypes or runs another program can still reach the network.

The child's whole process group (it starts in a new session) is killed when it exits or at the
wall-clock timeout, so processes it started go too, unless they left the group (setsid); those
keep only the CPU and memory limits they inherited. The combined stdout and stderr are read in
chunks and the child is killed once they pass what max_output_chars can show (with a margin),
so a huge print costs the driver a few kilobytes. Run as root, the code can also raise its own
limits: the sandbox guards against a model's mistakes, not against a program written to escape.

run_python never raises for what the code does (it is in the result's reason and output); it
raises SandboxError only when the launcher's own environment is broken (no interpreter, no
temporary folder), and ValueError for a limit that is not positive.
"""
import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TIMEOUT, ERROR, MEMORY, OUTPUT = "timeout", "error", "memory", "output"
"""SandboxResult.reason: ran past timeout_s (or its CPU limit); exited non-zero or was killed by a
signal; raised MemoryError; printed more than the cap allows (and was stopped)."""
NETWORK_DISABLED = "network is disabled in the sandbox"
CODE_FILE = "main.py"
"""The code's file in the child's folder: tracebacks name it and show its lines."""
FILE_LIMIT_MB = 16
NPROC_MARGIN = 32
TRACEBACK_FRAMES = 5
"""An uncaught exception prints the innermost frames only (and its message)."""
OUTPUT_MARGIN_BYTES = 4096
"""Read past the cap (max_output_chars as UTF-8, up to 4 bytes each) before stopping the child."""
READ_CHUNK_BYTES = 65536
EXIT_POLL_S = 0.005
EXIT_CHECK_S = 0.05
"""While the child is silent, how often to check whether it has exited."""

PRELUDE = f'''
import sys


def _sandbox():
    import builtins, json, resource, socket, traceback

    for name, (soft, hard) in json.loads(sys.argv[1]).items():
        try:
            which = getattr(resource, name)
            allowed = resource.getrlimit(which)[1]
            if allowed != resource.RLIM_INFINITY:
                soft, hard = min(soft, allowed), min(hard, allowed)
            resource.setrlimit(which, (soft, hard))
        except (AttributeError, ValueError, OSError):
            pass

    def refuse(*args, **kwargs):
        raise PermissionError({NETWORK_DISABLED!r})

    for name in ("connect", "connect_ex", "bind", "sendto", "sendmsg"):
        setattr(socket.socket, name, refuse)
    for name in ("create_connection", "create_server", "getaddrinfo", "gethostbyname", "gethostbyname_ex"):
        setattr(socket, name, refuse)

    with open({CODE_FILE!r}, encoding="utf-8") as file:
        source = file.read()
    sys.argv = [{CODE_FILE!r}]
    namespace = {{"__name__": "__main__", "__file__": {CODE_FILE!r}, "__builtins__": builtins}}
    try:
        exec(compile(source, {CODE_FILE!r}, "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as err:
        traceback.print_exception(type(err), err, err.__traceback__.tb_next, limit=-{TRACEBACK_FRAMES})
        sys.exit(1)


_sandbox()
'''
"""Run by the child before the code: limits (argv[1], JSON), the network guard, then main.py with
the prelude's own frame left out of tracebacks."""


class SandboxError(RuntimeError):
    """The launcher cannot run a sandboxed child at all (its environment is broken)."""


@dataclass(frozen=True)
class SandboxResult:
    ok: bool
    """Exited 0 within every limit."""
    output: str
    """stdout and stderr as printed, cut to max_output_chars (a note says how much was cut),
    then a line in brackets saying what went wrong, when something did."""
    reason: str | None = None
    """None when ok, else TIMEOUT, ERROR, MEMORY or OUTPUT."""
    exit_code: int | None = None
    """The child's return code (negative: the signal that ended it, -9 when it was stopped)."""


def run_python(code: str, timeout_s: float = 10.0, memory_mb: int = 512, max_output_chars: int = 4000) -> SandboxResult:
    """Run `code` in a sandboxed child (see the module docstring) and say how it went."""
    if timeout_s <= 0 or memory_mb <= 0 or max_output_chars <= 0:
        raise ValueError(f"run_python needs positive limits, got timeout_s={timeout_s}, memory_mb={memory_mb}, "
                         f"max_output_chars={max_output_chars}")
    workdir = _make_workdir()
    try:
        (workdir / CODE_FILE).write_text(code, encoding="utf-8", errors="replace")
        return _run(workdir, timeout_s, memory_mb, max_output_chars)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _make_workdir() -> Path:
    try:
        return Path(tempfile.mkdtemp(prefix="launcher-sandbox-"))
    except OSError as err:
        raise SandboxError(f"cannot create the sandbox's temporary folder: {err}") from err


def _run(workdir: Path, timeout_s: float, memory_mb: int, max_output_chars: int) -> SandboxResult:
    deadline = time.monotonic() + timeout_s
    proc = _start(workdir, _limits(timeout_s, memory_mb))
    try:
        raw, stop = _read_capped(proc, deadline, 4 * max_output_chars + OUTPUT_MARGIN_BYTES)
        if stop is None and not _wait_exit(proc, deadline):
            stop = TIMEOUT
    finally:
        _kill_group(proc.pid)  # before reaping: the group id cannot be reused while the child is a zombie
        proc.wait()
        proc.stdout.close()
    text = _cut(raw.decode("utf-8", errors="replace"), max_output_chars, stopped=stop == OUTPUT)
    reason = stop or _failure(proc.returncode, text)
    note = _note(reason, proc.returncode, text, timeout_s, memory_mb, max_output_chars)
    output = text if note is None else (text.rstrip("\n") + "\n" + note if text.strip() else note)
    return SandboxResult(ok=reason is None, output=output, reason=reason, exit_code=proc.returncode)


def _limits(timeout_s: float, memory_mb: int) -> dict[str, tuple[int, int]]:
    """Resource name -> (soft, hard), for the prelude."""
    memory, files, cpu = memory_mb * 2**20, FILE_LIMIT_MB * 2**20, math.ceil(timeout_s) + 1
    limits = {"RLIMIT_AS": (memory, memory), "RLIMIT_CPU": (cpu, cpu + 1), "RLIMIT_FSIZE": (files, files),
              "RLIMIT_CORE": (0, 0)}
    tasks = None if os.getuid() == 0 else _tasks_of(os.getuid())
    if tasks is not None:
        limits["RLIMIT_NPROC"] = (tasks + NPROC_MARGIN, tasks + NPROC_MARGIN)
    return limits


def _tasks_of(uid: int) -> int | None:
    """Processes and threads whose real user is `uid` (what RLIMIT_NPROC counts); None without /proc."""
    total = 0
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return None
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:  # ended meanwhile, or not ours to read
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if "Uid" in fields and "Threads" in fields and int(fields["Uid"].split()[0]) == uid:
            total += int(fields["Threads"])
    return total or None


def _start(workdir: Path, limits: dict[str, tuple[int, int]]) -> subprocess.Popen:
    command = [sys.executable, "-I", "-S", "-u", "-X", "utf8", "-c", PRELUDE, json.dumps(limits)]
    env = {"PATH": os.defpath, "HOME": str(workdir), "TMPDIR": str(workdir), "LANG": "C.UTF-8"}
    try:
        return subprocess.Popen(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except (OSError, ValueError) as err:  # ValueError: sys.executable is empty (an embedded interpreter)
        raise SandboxError(f"cannot start the sandbox's Python ({sys.executable!r}): {err}") from err


def _read_capped(proc: subprocess.Popen, deadline: float, limit_bytes: int) -> tuple[bytes, str | None]:
    """What the child writes until it closes its output or has exited with nothing more to read
    (None: processes it left behind may hold the pipe open), the deadline passes (TIMEOUT) or
    more than limit_bytes came (OUTPUT)."""
    fd, chunks, size = proc.stdout.fileno(), [], 0
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return b"".join(chunks), TIMEOUT
            if not selector.select(min(left, EXIT_CHECK_S)):
                if _has_exited(proc):
                    return b"".join(chunks), None
                continue
            chunk = os.read(fd, READ_CHUNK_BYTES)
            if not chunk:
                return b"".join(chunks), None
            chunks.append(chunk)
            size += len(chunk)
            if size > limit_bytes:
                return b"".join(chunks), OUTPUT


def _wait_exit(proc: subprocess.Popen, deadline: float) -> bool:
    """True once the child has exited, False at the deadline."""
    while not _has_exited(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(EXIT_POLL_S)
    return True


def _has_exited(proc: subprocess.Popen) -> bool:
    """Whether the child has exited, without reaping it (see _run)."""
    if not hasattr(os, "waitid"):  # macOS: reaped, its group id is then only very unlikely to be reused
        return proc.poll() is not None
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped by someone else (SIGCHLD ignored in this process)
        return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # nothing left in the group
        pass


def _cut(text: str, max_chars: int, stopped: bool) -> str:
    """text with its middle cut so that max_chars remain (the start, and the end where a traceback
    is), and a note of how much went; `stopped`: the child was stopped, it had more."""
    if len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    gone = len(text) - max_chars
    what = f"at least {gone}" if stopped else f"{gone}"
    return f"{text[:head]}\n... [{what} characters cut] ...\n{text[len(text) - tail:]}"


def _failure(exit_code: int, text: str) -> str | None:
    """The reason for a child that ended by itself: None (0), MEMORY, TIMEOUT (its CPU limit) or ERROR."""
    if exit_code == 0:
        return None
    if exit_code == -signal.SIGXCPU:
        return TIMEOUT
    last = text.rstrip().rpartition("\n")[2]
    return MEMORY if last.startswith("MemoryError") else ERROR


def _note(reason: str | None, exit_code: int, text: str, timeout_s: float, memory_mb: int,
          max_chars: int) -> str | None:
    """The bracketed line after the output saying what went wrong (None when ok or when the
    traceback printed above already says it)."""
    if reason == TIMEOUT:
        if exit_code == -signal.SIGXCPU:
            return f"[timed out: used more than {math.ceil(timeout_s) + 1} s of CPU time]"
        return f"[timed out after {timeout_s:g} s]"
    if reason == MEMORY:
        return f"[out of memory: the limit is {memory_mb} MB]"
    if reason == OUTPUT:
        return f"[stopped: the program printed more than {max_chars} characters]"
    if reason == ERROR and exit_code < 0:
        return f"[killed by {_signal_name(-exit_code)}]"
    if reason == ERROR and (exit_code != 1 or not text.strip()):
        return f"[exit code {exit_code}]"
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
