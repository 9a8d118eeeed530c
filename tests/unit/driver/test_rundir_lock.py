"""The run-directory lock, with real processes.

A live holder refuses a second `python -m launcher` before Ray starts (naming host, pid and
start time) and leaves the first run's files alone; a stale lock (dead pid, reused pid) is
taken over with a message; a holder on another host is refused with how to remove the lock.
"""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.driver.records.rundir import LOCK_NAME, RunDirLock, RunDirLocked, _pid_start

ROOT = Path(__file__).resolve().parents[3]
HOLDER = """
import sys, time
from launcher.driver.records.rundir import RunDirLock
with RunDirLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def holder(tmp_path):
    run_dir = tmp_path / "tiny_grpo"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield run_dir, proc
    proc.kill()
    proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "plan"])
def test_second_process_is_refused_fast_naming_the_holder(tmp_path, holder, command):
    run_dir, proc = holder
    (run_dir / "config.yaml").write_text("the first run's\n")
    started = time.monotonic()
    out = _cli(command, "recipe=tiny_grpo", f"run.output_dir={tmp_path}")
    assert out.returncode == 1, out.stdout + out.stderr
    assert time.monotonic() - started < 30  # no Ray was started
    assert f"pid {proc.pid}" in out.stderr and socket.gethostname() in out.stderr and "started 20" in out.stderr
    assert "Traceback" not in out.stderr
    assert (run_dir / "config.yaml").read_text() == "the first run's\n"


@pytest.mark.slow
def test_lock_is_released_when_the_holder_exits(tmp_path, holder):
    run_dir, proc = holder
    proc.kill()
    proc.wait()
    out = _cli("plan", "recipe=tiny_grpo", f"run.output_dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    assert (run_dir / "config.yaml").exists() and not (run_dir / LOCK_NAME).exists()  # released at exit


def _write_lock(run_dir: Path, **holder) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / LOCK_NAME).write_text(json.dumps({"started": "2026-01-01T00:00:00Z", **holder}))


@pytest.mark.slow
def test_stale_lock_of_a_dead_pid_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _write_lock(tmp_path / "tiny_grpo", host=socket.gethostname(), pid=dead.pid, pid_start="1")
    out = _cli("plan", "recipe=tiny_grpo", f"run.output_dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    assert "taking over the stale lock" in out.stderr and f"pid {dead.pid}" in out.stderr and "gone" in out.stderr
    assert (tmp_path / "tiny_grpo" / "config.yaml").exists()


def test_stale_lock_of_a_reused_pid_is_taken_over(tmp_path):
    """Our own pid with another start time: the recorded holder is not this process."""
    _write_lock(tmp_path / "run", host=socket.gethostname(), pid=os.getpid(), pid_start="-1")
    with RunDirLock(tmp_path / "run") as lock:
        held = json.loads(lock.path.read_text())
        assert held["pid"] == os.getpid() and held["pid_start"] == _pid_start(os.getpid())


def test_live_pid_without_flock_is_still_refused(tmp_path):
    """A same-host holder whose pid is alive with its start time: refused, not taken over."""
    _write_lock(tmp_path / "run", host=socket.gethostname(), pid=os.getppid(), pid_start=_pid_start(os.getppid()))
    with pytest.raises(RunDirLocked, match=f"pid {os.getppid()}"):
        RunDirLock(tmp_path / "run").acquire()


@pytest.mark.slow
def test_holder_on_another_host_is_live_and_the_message_says_how_to_remove(tmp_path):
    _write_lock(tmp_path / "tiny_grpo", host="node-17.elsewhere", pid=4242, pid_start="99")
    out = _cli("run", "recipe=tiny_grpo", f"run.output_dir={tmp_path}")
    assert out.returncode == 1
    assert "node-17.elsewhere" in out.stderr and "pid 4242" in out.stderr
    assert f"remove {tmp_path / 'tiny_grpo' / LOCK_NAME}" in out.stderr
    assert not (tmp_path / "tiny_grpo" / "config.yaml").exists()


def test_lock_released_on_error(tmp_path):
    with pytest.raises(KeyboardInterrupt), RunDirLock(tmp_path / "run"):
        raise KeyboardInterrupt
    RunDirLock(tmp_path / "run").acquire().release()


@pytest.mark.slow
def test_sweep_points_take_their_own_lock(tmp_path):
    point0 = tmp_path / "tiny_grpo" / "sweep" / "0"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(point0)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        out = _cli("-m", "plan", "recipe=tiny_grpo", "algorithm.temperature=0.9,1.0", f"run.output_dir={tmp_path}")
        assert f"pid {proc.pid}" in out.stderr and out.returncode == 1
        assert (tmp_path / "tiny_grpo" / "sweep" / "1" / "config.yaml").exists()
        assert not (point0 / "config.yaml").exists()
    finally:
        proc.kill()
        proc.wait()


def test_dead_holder_whose_child_keeps_the_lock_is_named(tmp_path):
    """A driver killed while a process it forked lives on: still locked, and the message says why."""
    script = ("import os, sys, time\nfrom launcher.driver.records.rundir import RunDirLock\nRunDirLock(sys.argv[1]).acquire()\n"
              "child = os.fork()\nif child == 0:\n    time.sleep(60)\n    os._exit(0)\n"
              "print(os.getpid(), child, flush=True)\nos._exit(0)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "run")], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    holder_pid, child_pid = map(int, proc.stdout.readline().split())
    proc.wait()
    try:
        with pytest.raises(RunDirLocked, match=f"pid {holder_pid} .* has exited"):
            RunDirLock(tmp_path / "run").acquire()
    finally:
        os.kill(child_pid, 9)
