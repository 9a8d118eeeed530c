"""The records that let a run stop what a SIGKILLed driver's embedded Ray left
(launcher/driver/actors/ray_processes.py), over real processes: only entries whose driver
is gone are acted on, and only processes with the recorded pid *and* start time are
killed (a reused pid is someone else's). The real SIGKILL is tests/integration/test_hangs.py."""
import json
import subprocess
import sys

import psutil
import pytest

from launcher.driver.actors import ray_processes


@pytest.fixture
def records(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    path = ray_processes.records_dir()
    path.mkdir(parents=True)
    return path


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def _identity(pid: int, name: str = "x") -> dict:
    return {"pid": pid, "create_time": psutil.Process(pid).create_time(), "name": name}


def _dead_driver() -> dict:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    identity = _identity(proc.pid, "python")
    proc.wait()
    return identity


def test_a_dead_drivers_leftovers_are_stopped_and_its_record_removed(records, sleeper):
    record = records / "1.json"
    record.write_text(json.dumps({"driver": _dead_driver(),
                                  "processes": [_identity(sleeper.pid, "ray::DashboardAgent")]}))
    assert ray_processes.reap_dead_sessions() == [f"ray::DashboardAgent pid {sleeper.pid}"]
    assert sleeper.wait(timeout=5) is not None
    assert not record.exists()


def test_a_live_drivers_processes_and_a_reused_pid_are_left_alone(records, sleeper):
    live = records / "live.json"
    live.write_text(json.dumps({"driver": _identity(psutil.Process().pid), "processes": [_identity(sleeper.pid)]}))
    reused = {**_identity(sleeper.pid), "create_time": _identity(sleeper.pid)["create_time"] - 100}
    (records / "dead.json").write_text(json.dumps({"driver": _dead_driver(), "processes": [reused]}))
    assert ray_processes.reap_dead_sessions() == []
    assert sleeper.poll() is None
    assert live.exists() and not (records / "dead.json").exists()
