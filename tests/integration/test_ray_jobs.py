"""`submit` / `-m submit` / `jobs` against a real Ray head (`ray start --head` with the dashboard, token
auth): the legal points of a sweep run as Ray jobs from the shipped working_dir and write their run
directories; the illegal point is listed and never reaches the cluster. (A point whose run directory
a live run holds is refused before anything is sent: tests/unit/test_submit.py.)"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import ROOT, SMALL
from ray_cluster_helpers import RayCluster

pytest.importorskip("ray")
pytestmark = pytest.mark.slow
TINY = [*SMALL, "run.steps=2"]


@pytest.fixture(scope="module")
def job_cluster():
    """One head with the job API; 2 declared GPUs so both tiny jobs (1 GPU each) run at once. The
    project's venv leads PATH, as on a node where `ray start` ran from it: the entrypoint's `python`."""
    cluster = RayCluster()
    cluster.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    try:
        cluster.start_head(num_cpus=2, num_gpus=2, dashboard=True)
        yield cluster
    finally:  # also when `ray start` fails half-way (its timeout on a loaded machine)
        assert cluster.stop() == [], "processes of the test Ray cluster outlived it"


def _launcher(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


# Run in a subprocess: Ray reads RAY_AUTH_MODE once per process, and this one's Ray may be set up already.
_QUERY = """
import json, sys, time
from ray.job_submission import JobSubmissionClient
client, wait = JobSubmissionClient(sys.argv[1]), sys.argv[2:]
deadline = time.monotonic() + 150
while wait and time.monotonic() < deadline and not all(client.get_job_status(j).is_terminal() for j in wait):
    time.sleep(0.5)
def row(j):
    return {"state": j.status.value, "working_dir": (j.runtime_env or {}).get("working_dir"),
            "log": client.get_job_logs(j.submission_id)[-3000:] if j.status.value != "SUCCEEDED" else ""}
print(json.dumps({j.submission_id: row(j) for j in client.list_jobs() if j.submission_id}))
"""


def _cluster_jobs(url: str, wait_for: tuple[str, ...] = ()) -> dict[str, dict]:
    """Every job the cluster knows (state, working_dir URI, log tail unless it succeeded), after the
    `wait_for` jobs ended."""
    done = subprocess.run([sys.executable, "-c", _QUERY, url, *wait_for], env={**os.environ, "RAY_AUTH_MODE": "token"},
                          capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sweep_submits_legal_points_as_ray_jobs_and_jobs_lists_them(job_cluster, tmp_path):
    keys = ["recipe=tiny_grpo", "algorithm.prompts_per_step=4", "algorithm.mini_batch_prompts=4", "run.steps=2",
            "cluster.gpus_per_node=1", "inference.engines=1",  # one trainer rank and one engine per job
            f"run.output_dir={tmp_path}", "run.name=jobsweep", f"cluster.ray_address={job_cluster.address}",
            f"cluster.dashboard_address={job_cluster.dashboard_url}"]
    out = _launcher("-m", "submit", *keys, "algorithm.samples_per_prompt=8,4,1")  # 1: no group to compare (BATCH003)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stderr.count("[WARNING RUN003] run.output_dir") == 1, out.stderr  # tmp_path: /tmp is node-local
    records = json.loads((tmp_path / "jobsweep" / "jobs.json").read_text())
    assert [r["status"] for r in records] == ["submitted", "submitted", "illegal"], records
    assert records[2]["job_id"] is None and "BATCH003" in records[2]["reason"]
    job_ids = [r["job_id"] for r in records[:2]]
    for job_id, record in zip(job_ids, records, strict=False):
        assert f"job {job_id}  run dir {record['run_dir']}" in out.stdout and f"ray job logs {job_id}" in out.stdout

    on_cluster = _cluster_jobs(job_cluster.dashboard_url)
    assert set(on_cluster) == set(job_ids), "the illegal point reached the cluster"
    assert all(j["working_dir"].startswith("gcs://") for j in on_cluster.values()), "code not shipped"
    on_cluster = _cluster_jobs(job_cluster.dashboard_url, tuple(job_ids))
    assert {j["state"] for j in on_cluster.values()} == {"SUCCEEDED"}, on_cluster
    packages = list(job_cluster.tmp.glob("ray/session_*/runtime_resources/working_dir_files/*/"))
    assert packages, "no working_dir unpacked on the head"
    for shipped in packages:  # one per distinct upload (other edits to the checkout between the two give two)
        assert (shipped / "launcher" / "__main__.py").is_file() and (shipped / "recipes/tiny_grpo.yaml").is_file()
        assert [p for p in (".venv", ".venv-vllm", "runs", ".git", ".whl", ".pkgs") if (shipped / p).exists()] == []
    for index in (0, 1):
        rows = [json.loads(line) for line in (tmp_path / "jobsweep" / "sweep" / str(index) / "metrics.jsonl")
                .read_text().splitlines()]
        assert [r["step"] for r in rows if "startup" not in r] == [1, 2], rows
    assert not (tmp_path / "jobsweep" / "sweep" / "2").exists()

    listed = _launcher("jobs", f"run.output_dir={tmp_path}", "--format", "json")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert [(r["job_id"], r["state"]) for r in json.loads(listed.stdout)] == [
        (job_ids[0], "SUCCEEDED"), (job_ids[1], "SUCCEEDED"), (None, "not submitted (illegal)")]

