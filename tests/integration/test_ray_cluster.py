"""The launcher next to and on a real Ray cluster started on this machine (`ray start`).

- Embedded mode starts its own private Ray even when a cluster runs here (as on most GPU
  nodes), instead of trying to join it.
- Secret environment variables reach the workers but never Ray's logs or the run dir.
- Remote mode checks the live cluster's nodes and GPUs against the plan in seconds.
"""
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from launch_helpers import SMALL
from ray_cluster_helpers import RayCluster

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import a test module
TINY = [*SMALL, "run.steps=2"]


def _files_holding(root: Path, needle: bytes) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                hits.append(str(path))
        except OSError:
            continue
    return hits


def _env_of(actor_self, names: tuple[str, ...]) -> dict:
    """Runs inside an actor (Ray's __ray_call__): the named variables of its process."""
    return {name: os.environ.get(name) for name in names}


@pytest.fixture
def ray_cluster():
    cluster = RayCluster()
    yield cluster
    assert cluster.stop() == [], "processes of the test Ray cluster outlived it"


def test_embedded_run_starts_private_ray_next_to_running_cluster(ray_cluster, launch_run, monkeypatch):
    ray_cluster.start_head(num_cpus=1)
    # The launcher sees the cluster exactly as a user's shell on that node would.
    monkeypatch.setenv("RAY_TMPDIR", str(ray_cluster.tmp))
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)
    run = launch_run("beside", TINY)
    code, out, err = run.finish()
    assert code == 0, err[-3000:]
    assert "private" in out
    assert len(run.metrics()) == 2
    assert run.leftover_daemons() == []
    assert ray_cluster.processes(), "the launcher stopped the cluster it should have left alone"


@pytest.fixture
def ray_tmpdir():
    """Short (Ray's socket paths live under it, ~107 bytes at most), removed at the end."""
    path = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_secret_env_reaches_actors_but_no_log_or_run_file(launch_run, monkeypatch, ray_tmpdir):
    from launcher.config.compose import compose
    from launcher.driver.actors.cluster import ray_session
    from launcher.driver.actors.session import place_groups
    from launcher.plan import make_plan

    secret, hf_secret = f"fake-wandb-{uuid.uuid4().hex}", f"fake-hf-{uuid.uuid4().hex}"
    ray_tmp = ray_tmpdir
    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))  # the embedded session's logs land here
    env = [f"+env.WANDB_API_KEY={secret}", f"+env.HF_TOKEN={hf_secret}", "+env.LAUNCHER_TEST_PLAIN=visible"]
    config = compose(["recipe=tiny_grpo", "run.name=secret-env", *TINY, *env]).config
    plan = make_plan(config)
    names = ("WANDB_API_KEY", "HF_TOKEN", "LAUNCHER_TEST_PLAIN")
    with ray_session(config, plan.env):
        trainers, engines = place_groups(config, plan, embedded=True)
        seen = ray.get([a.__ray_call__.remote(_env_of, names) for a in trainers.actors + engines.actors])
    assert seen and all(s == {"WANDB_API_KEY": secret, "HF_TOKEN": hf_secret, "LAUNCHER_TEST_PLAIN": "visible"}
                        for s in seen), seen

    run = launch_run("secret-run", [*TINY, *env])  # a whole job: driver, loop, logs, checkpoints
    code, out, err = run.finish()
    assert code == 0, err[-3000:]
    assert len(run.metrics()) == 2
    assert list((ray_tmp / "ray").glob("session_*/logs/runtime_env_agent.log")), "no Ray session logs to check"
    for value in (secret, hf_secret):
        assert value not in out + err
        assert _files_holding(ray_tmp, value.encode()) == []
        assert _files_holding(run.dir, value.encode()) == []
    assert _files_holding(ray_tmp, b"LAUNCHER_TEST_PLAIN"), "the test looked in the wrong place"


@pytest.fixture
def two_node_cluster(ray_cluster):
    """Head and one worker, each declaring 2 GPUs (no hardware needed) and a custom resource."""
    ray_cluster.start_head(num_cpus=2, num_gpus=2, resources='{"rack_a": 1}')
    ray_cluster.add_worker(num_cpus=2, num_gpus=2, resources='{"rack_b": 1}')
    ray_cluster.wait_for_nodes(2)
    return ray_cluster


def test_preflight_names_what_plan_needs_and_cluster_has(two_node_cluster, launch_run, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    started = time.monotonic()
    run = launch_run("too-big", [*TINY, f"cluster.ray_address={two_node_cluster.address}",
                                 "cluster.gpus_per_node=8", "inference.engines=8"])
    code, out, err = run.finish(timeout_s=60)
    assert code == 3, out[-2000:] + err[-3000:]
    assert time.monotonic() - started < 30, "the mismatch was found by waiting, not by the preflight"
    assert "Traceback" not in err, err[-3000:]
    assert f"the Ray cluster at {two_node_cluster.address} cannot hold the plan" in err
    assert "logical node 0: GPU 8" in err
    assert "2 alive node(s)" in err
    assert err.count("CPU 2, GPU 2") == 2, err
    assert "cluster.gpus_per_node" in err


def test_async_run_puts_trainer_and_engine_on_different_ray_nodes(two_node_cluster, launch_run, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    # Each Ray node has 2 GPUs, each logical node needs 1: both would fit on the head alone.
    run = launch_run("async-2node", ["recipe=tiny_dapo_async", *TINY, f"cluster.ray_address={two_node_cluster.address}"])
    code, out, err = run.finish()
    assert code == 0, out[-2000:] + err[-3000:]
    assert len(run.metrics()) == 2
    actors = json.loads((run.dir / "actors.json").read_text())
    by_role = {a["role"]: a for a in actors}
    assert by_role["trainer"]["ray_node_id"] != by_role["engine"]["ray_node_id"], actors
    assert all(a["host"] and a["ip"] for a in actors), actors
    # cluster.ship_code (default): the driver's ray.init shipped the repository as the workers' working_dir
    assert list(two_node_cluster.tmp.glob("ray/session_*/runtime_resources/working_dir_files/*/launcher/__main__.py"))
