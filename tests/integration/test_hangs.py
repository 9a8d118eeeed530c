"""Hangs become errors, SIGTERM while Ray starts is an interrupt, and a SIGKILLed driver's
leftovers are cleaned up by the next run: real runs of `python -m launcher`, real signals.

Each run's Ray processes are found as descendants of its driver (or from the record its
embedded Ray wrote), never by name alone: other tests' Ray clusters may be running here.
"""
import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import time

import psutil
import pytest
import ray
from launch_helpers import SMALL

from launcher.driver.actors.actor_group import ActorGroup
from launcher.driver.actors.deadlines import CallDeadlines
from launcher.driver.actors.errors import HangError
from launcher.driver.actors.ray_processes import records_dir

pytestmark = pytest.mark.slow
HANG_S = 10


def _wait_until(predicate, run, what: str, timeout_s: float = 240):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run._note_daemons()
        if (found := predicate()) is not None:
            return found
        if run.proc.poll() is not None:
            raise AssertionError(f"run ended before {what}:\n{run.proc.stderr.read()[-3000:]}")
        time.sleep(0.02)
    raise AssertionError(f"no {what} within {timeout_s} s")


def _ray_descendants(run) -> dict[int, str]:
    """pid -> name of every process under the run's driver now (all Ray's: daemons, agents, workers)."""
    try:
        children = psutil.Process(run.proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return {}
    out = {}
    for child in children:
        try:
            out[child.pid] = child.name()
        except psutil.Error:
            continue
    return out


def _running(processes: dict[int, str]) -> dict[int, str]:
    """Those of `processes` (pid -> name) still running now (not exited, not a zombie)."""
    out = {}
    for pid, name in processes.items():
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out[pid] = name
    return out


def _still_running(processes: dict[int, str], within_s: float = 10) -> dict[int, str]:
    """Those of `processes` still running after up to within_s seconds (what exits takes a moment)."""
    deadline = time.monotonic() + within_s
    while (alive := _running(processes)) and time.monotonic() < deadline:
        time.sleep(0.25)
    return alive


@ray.remote(num_cpus=0)
class _Napper:
    def pid(self):
        return os.getpid()

    def nap(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds


def test_a_call_past_its_deadline_names_only_the_actors_that_did_not_answer():
    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR")  # never a running cluster
    try:
        group = ActorGroup(CallDeadlines(hang_timeout_s=1.0))
        group.actors, group.labels = [_Napper.remote(), _Napper.remote()], ["trainer rank 0", "trainer rank 1"]
        group.info = [{"node": 0, "gpu": i, "pid": None} for i in range(2)]
        group.wait_ready()  # first calls: the start-up allowance, not 1 s
        assert group._get([a.nap.remote(1.5) for a in group.actors], "nap") == [1.5, 1.5]  # first call again
        started = time.monotonic()
        with pytest.raises(HangError, match=rf"^trainer rank 1 \(pid {group.info[1]['pid']}, node 0 GPU 1\) did not "
                                            r"answer nap within 1 s \(deadline: run.hang_timeout_s=1\)"):
            group._get([group.actors[0].nap.remote(0), group.actors[1].nap.remote(60)], "nap")
        assert time.monotonic() - started < 5
    finally:
        ray.shutdown()


def test_a_stopped_engine_fails_the_run_naming_it_and_the_call(launch_run):
    run = launch_run("hang", SMALL + ["run.steps=200", f"run.hang_timeout_s={HANG_S}"])
    run.wait_for_step(2, timeout_s=480)  # start-up takes minutes on a loaded 2-core machine
    victim = next(a for a in json.loads((run.dir / "actors.json").read_text()) if a["label"] == "engine 0")
    os.kill(victim["pid"], signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        code, _, err = run.finish(timeout_s=HANG_S + 90)
        elapsed = time.monotonic() - stopped_at
    finally:
        if psutil.pid_exists(victim["pid"]):
            os.kill(victim["pid"], signal.SIGCONT)
    assert code == 3, err[-3000:]
    who = re.escape(f"engine 0 (pid {victim['pid']}, node {victim['node']} GPU {victim['gpu']})")
    found = re.search(rf"run failed: {who} did not answer ([\w ]+?) within (\d+) s \(deadline: run.hang_timeout_s={HANG_S}\)",
                      err)
    assert found, err[-3000:]
    assert HANG_S <= int(found[2]) <= HANG_S + 5
    assert elapsed < HANG_S + 60, f"the run took {elapsed:.0f} s to fail after the engine stopped"
    assert run.leftover_daemons() == []
    assert _still_running({victim["pid"]: victim["label"]}) == {}


def test_sigterm_while_ray_starts_exits_143_and_leaves_no_ray_process(launch_run):
    run = launch_run("term", SMALL)
    # gcs_server is Ray's first process: from here until actors start, ray.init is running.
    _wait_until(lambda: next((p for p, n in _ray_descendants(run).items() if n == "gcs_server"), None), run,
                "gcs_server")
    run.proc.send_signal(signal.SIGTERM)
    started = {}
    while run.proc.poll() is None:  # every process Ray starts until the driver is gone (agents come late)
        started.update(_ray_descendants(run))
        time.sleep(0.02)
    code, out, err = run.finish(timeout_s=60)
    assert code == 143, err[-3000:]
    assert "interrupted during Ray start-up (SIGTERM); Ray stopped" in err, err[-3000:]
    assert _still_running(started) == {}


@pytest.fixture
def private_ray_tmp(monkeypatch):
    """A Ray temp dir of this test's runs alone: another launcher starting on this machine would
    clean up the killed run's leftovers itself. Short: Ray's socket paths must stay < 107 bytes."""
    tmp = tempfile.mkdtemp(prefix="rh", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", tmp)
    yield
    shutil.rmtree(tmp, ignore_errors=True)


def test_the_next_run_stops_what_a_sigkilled_drivers_ray_left(launch_run, private_ray_tmp):
    killed = launch_run("killed", SMALL)
    record = records_dir() / f"{killed.proc.pid}.json"
    _wait_until(lambda: True if record.exists() else None, killed, "the embedded Ray's record")
    left = {p["pid"]: p["name"] for p in json.loads(record.read_text())["processes"]}
    assert {"raylet", "gcs_server"} <= set(left.values())
    killed.proc.kill()
    killed.proc.wait()
    # Stopped, nothing can exit by itself (left alone the agents exit within about a minute,
    # which a slow start of the next run could outlast): what the kernel kills with the driver
    # (gcs_server, raylet) dies anyway; the rest only the next run can end.
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGSTOP)
    time.sleep(2)
    lingering = _running(left)
    assert lingering, "nothing outlived the SIGKILLed driver: this test would prove nothing"
    try:
        nxt = launch_run("next", SMALL)
        nxt_record = records_dir() / f"{nxt.proc.pid}.json"  # written once its Ray is up, after the clean-up
        _wait_until(lambda: True if nxt_record.exists() else None, nxt, "the next run's Ray")
        not_stopped = _running(lingering)
        nxt.proc.send_signal(signal.SIGTERM)
        code, out, err = nxt.finish(timeout_s=60)
    finally:
        for pid in _running(lingering):
            os.kill(pid, signal.SIGKILL)
    assert not_stopped == {}, f"still running after the next run started: {not_stopped}"
    assert code == 143, err[-3000:]
    line = next((ln for ln in out.splitlines() if "left by an earlier run whose driver was killed" in ln), "")
    for pid, name in lingering.items():
        assert f"{name} pid {pid}" in line, out[-3000:]
    assert not record.exists()
