"""The script of `python -m launcher sbatch` under a real Slurm (tests/integration/slurm_cluster.py):
Ray comes up inside the allocation with its token authentication, the run trains, and Ray and
the job's token go however the job ends, `scancel` included."""
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import slurm_cluster
from launch_helpers import SMALL

pytestmark = [pytest.mark.slow, pytest.mark.skipif(slurm_cluster.missing() is not None,
                                                  reason=slurm_cluster.missing() or "")]
ROOT = Path(__file__).resolve().parents[2]
RAY_DAEMONS = ("raylet", "gcs_server")
ADDRESS_FILE = Path("/tmp/ray/ray_current_cluster")
"""Where a default `ray start --head` records its address: a later plain `ray.init()` on the machine
joins that cluster (or fails if it is gone). The job's Ray keeps it in its own temp dir."""


def _address_file_stamp() -> float | None:
    return ADDRESS_FILE.stat().st_mtime if ADDRESS_FILE.exists() else None


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster, procs = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    yield cluster
    slurm_cluster.stop(procs)


def _sbatch(slurm, tmp_path: Path, name: str, *overrides: str) -> subprocess.CompletedProcess:
    """`python -m launcher sbatch` for tiny_grpo, with this Slurm's sinfo answering its preflight."""
    return subprocess.run([sys.executable, "-m", "launcher", "sbatch", "recipe=tiny_grpo", f"run.output_dir={tmp_path}",
                           f"run.name={name}", *overrides], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=slurm.env)


def _script(slurm, tmp_path: Path, *overrides: str) -> Path:
    done = _sbatch(slurm, tmp_path, "slurm", *overrides)
    assert done.returncode == 0, done.stderr[-2000:]
    script = tmp_path / "slurm" / "sbatch.sh"
    assert "\n#SBATCH --time=0-00:" in script.read_text()  # the plan's limit, which Slurm enforces
    return script


def _submit(slurm, script: Path) -> str:
    return slurm.run("sbatch", "--parsable", str(script)).strip().split(";")[0]


def _ray_daemons() -> list[str]:
    return [p.info["name"] for p in psutil.process_iter(["name"]) if p.info["name"] in RAY_DAEMONS]


def _wait_for(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(1)


def test_the_batch_script_trains_on_the_allocation_and_stops_ray(slurm, tmp_path):
    script, stamp = _script(slurm, tmp_path, "run.steps=2"), _address_file_stamp()
    job = _submit(slurm, script)
    assert slurm.wait_for_end(job, timeout_s=300) == "COMPLETED", (script.parent / f"slurm-{job}.out").read_text()[-3000:]
    out = (script.parent / f"slurm-{job}.out").read_text()
    assert "step    2/2 |" in out and "done: 2 steps" in out
    assert (script.parent / "checkpoints" / "step_000002" / "COMPLETE").is_file()
    assert list(script.parent.glob(".ray_auth_token.*")) == []  # the job's token goes with it
    _wait_for(lambda: not _ray_daemons(), 30, "end of the job's Ray daemons")
    assert _address_file_stamp() == stamp


def test_scancel_stops_the_run_and_leaves_no_ray(slurm, tmp_path):
    script, stamp = _script(slurm, tmp_path, "run.steps=500"), _address_file_stamp()
    job = _submit(slurm, script)
    metrics = script.parent / "metrics.jsonl"
    _wait_for(lambda: metrics.exists() and '"step_s"' in metrics.read_text(), 240, "first step")
    assert _ray_daemons()
    slurm.run("scancel", job)
    assert slurm.wait_for_end(job, timeout_s=60) == "CANCELLED"
    _wait_for(lambda: not _ray_daemons(), 60, "end of the cancelled job's Ray daemons")
    assert _address_file_stamp() == stamp  # nothing a later ray.init() on this machine would join


@pytest.mark.parametrize("overrides, lacking", [
    (["cluster.gpus_per_node=4", "inference.engines=4"], "cluster.gpus_per_node=4 but the nodes of partition debug "
                                                         "offer 2 GPU(s) each"),
    (["cluster.nodes=2", "inference.engines=4"], "cluster.nodes=2 but partition debug has 1 node(s)"),
])
def test_a_plan_the_partition_cannot_hold_is_refused_before_a_script(slurm, tmp_path, overrides, lacking):
    done = _sbatch(slurm, tmp_path, "big", *overrides)
    assert done.returncode == 1 and lacking in done.stderr, done.stderr
    assert not (tmp_path / "big").exists()


def test_a_partition_time_limit_below_the_plans_is_refused_before_a_script(slurm, tmp_path):
    """MaxTime=5 (minutes) on the test partition, read back by sinfo; every tiny_grpo job needs more
    (the readiness waits alone are 10 minutes)."""
    slurm.run("scontrol", "update", "PartitionName=debug", "MaxTime=5")
    try:
        done = _sbatch(slurm, tmp_path, "long", "run.steps=2")
    finally:
        slurm.run("scontrol", "update", "PartitionName=debug", "MaxTime=INFINITE")
    assert done.returncode == 1, done.stderr
    assert "run.steps=2 needs --time=0-00:" in done.stderr and "partition debug allows 0-00:05:00" in done.stderr
    assert not (tmp_path / "long").exists()


SLOW_REWARD = '''
import os
import time

def slow_copy(data_source, solution_str, ground_truth, extra_info):
    """The copy task's partial credit, 30 ms late while the file SLOW exists beside this module:
    steps of about a second until the test removes it, so that the first two allocations end with
    the run unfinished and the third finishes it fast."""
    if os.path.exists(os.path.join(os.path.dirname(__file__), "SLOW")):
        time.sleep(0.03)
    right = sum(a == b for a, b in zip(solution_str, ground_truth))
    return {"score": right / max(len(solution_str), len(ground_truth), 1), "acc": solution_str == ground_truth}
'''


def _training_steps(run_dir: Path) -> list[int]:
    import json

    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    return [row["step"] for row in map(json.loads, filter(None, lines)) if "reward" in row]


def _requeued(slurm, job: str, restarts: int) -> None:
    """Wait until the job is pending again after its `restarts`-th requeue and its node is idle, then
    let it start (Slurm holds a requeued job for about two minutes). slurmd remembers the killed job
    with a whole-second time and refuses to launch it again within that second ("already killed, do
    not launch batch job": the job ends FAILED), so the release waits two seconds past the idle node."""
    _wait_for(lambda: f"Restarts={restarts}" in slurm.run("scontrol", "show", "job", job)
              and slurm.job_state(job) == "PENDING", 180, f"requeue {restarts}")
    _wait_for(lambda: slurm.run("sinfo", "-h", "-o", "%T").strip() == "idle", 60, "the node idle after the requeue")
    time.sleep(2)
    slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now", "TimeLimit=30")


def test_usr1_before_the_time_limit_or_from_scancel_saves_requeues_and_the_job_completes(slurm, tmp_path,
                                                                                       monkeypatch):
    """The script's `--signal=B:USR1@<grace>` reaches the launcher ahead of a time limit (cut to two
    minutes once the run trains), the run saves its last step and the job is requeued; the requeued
    job resumes, is stopped the same way by `scancel --signal=USR1 --batch`, and the third start
    completes the run with every step once."""
    (tmp_path / "slurm_slow_reward.py").write_text(SLOW_REWARD)
    (tmp_path / "SLOW").touch()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # slurm.env, the job's too (sbatch exports it)
    script = _script(slurm, tmp_path, *SMALL, "run.steps=80", "checkpoint.every_steps=1000",
                     "run.preemption_grace_s=60", "data.reward_fn=slurm_slow_reward:slow_copy")
    assert "\n#SBATCH --signal=B:USR1@60\n" in script.read_text()
    job = _submit(slurm, script)
    try:
        _preempted_twice_then_completed(slurm, job, script.parent)
    finally:  # a failure must not leave the job (and its Ray on the fixed port) to the next test
        slurm.run("scancel", job, check=False)


def _preempted_twice_then_completed(slurm, job: str, run_dir: Path) -> None:
    out = run_dir / f"slurm-{job}.out"
    _wait_for(lambda: len(_training_steps(run_dir)) >= 2, 240, "step 2")
    slurm.run("scontrol", "update", f"JobId={job}", "TimeLimit=2")  # USR1 60 s before: about 30 s from now
    _requeued(slurm, job, restarts=1)
    first = _training_steps(run_dir)
    assert first == list(range(1, first[-1] + 1)) and first[-1] < 78, out.read_text()[-3000:]
    assert "stopped on SIGUSR1" in out.read_text() and (run_dir / "checkpoints" / f"step_{first[-1]:06d}").is_dir()
    _wait_for(lambda: len(_training_steps(run_dir)) >= first[-1] + 2, 240, "two steps after the resume")
    slurm.run("scancel", "--signal=USR1", "--batch", job)
    (run_dir.parent / "SLOW").unlink()  # the third start trains the rest at full speed
    _requeued(slurm, job, restarts=2)
    assert slurm.wait_for_end(job, timeout_s=300) == "COMPLETED", out.read_text()[-3000:]
    text = out.read_text()
    assert text.count("requeueing job") == 2 and text.count("resumed from") == 2 and "done: 80 steps" in text
    assert _training_steps(run_dir) == list(range(1, 81))
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]
