"""An actor lost mid-way ends `export` and the fully async loop with a clear error naming the
actor and the call it was in, within the call's deadline, exit 3, no traceback and no Ray
process left: killed (as ray.kill does) or stopped (SIGSTOP: alive, answering nothing).

Export runs in this process (its trainer rank 0 is killed between the export header and the
first bucket); the async runs are `python -m launcher` subprocesses of tiny_dapo_async."""
import contextlib
import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
import yaml

from launcher.config.compose import compose
from launcher.contract.spec import ActorSpec

pytestmark = pytest.mark.slow
HANG_S = 10
RUN = ["recipe=tiny_grpo", "trainer.backend=hf"]
ASYNC = ["recipe=tiny_dapo_async", "algorithm.prompts_per_step=4", "algorithm.mini_batch_prompts=4",
         "algorithm.samples_per_prompt=8", "run.steps=200", "checkpoint.every_steps=0"]


def _checkpoint(tmp_path: Path) -> Path:
    """A complete step_000002 of a tiny_grpo run directory (overrides.yaml above it), saved by
    one in-process hf trainer rank: what `export` reads, without a training run."""
    from launcher.driver.records.checkpoint import Checkpointer, DriverState
    from launcher.workers import trainer_class

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "overrides.yaml").write_text(yaml.safe_dump({"overrides": RUN}))
    trainer = trainer_class("hf")(ActorSpec.planned(compose(RUN).config, 0, 1))

    class OneRank:
        def call(self, method: str, *args) -> list:
            return [getattr(trainer, method)(*args)]

    Checkpointer(run_dir / "checkpoints", every_steps=2, keep=1, total_steps=2).save(OneRank(), DriverState(step=2))
    return run_dir / "checkpoints" / "step_000002"


def _ray_children() -> dict[int, str]:
    """This process's Ray daemons and workers now (pid -> name)."""
    out = {}
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.status() != psutil.STATUS_ZOMBIE and ("ray" in child.name() or child.name() == "gcs_server"):
                out[child.pid] = child.name()
    return out


def test_export_ends_naming_the_trainer_rank_killed_mid_stream(tmp_path, monkeypatch, capsys):
    import ray

    from launcher.__main__ import main
    from launcher.driver.actors.trainer_group import TrainerGroup

    checkpoint, out = _checkpoint(tmp_path), tmp_path / "exported"
    killed = {}
    next_bucket = TrainerGroup.next_bucket

    def kill_rank0_first(group):
        killed["pid"] = group.info[0]["pid"]
        ray.kill(group.actors[0])
        return next_bucket(group)

    monkeypatch.setattr(TrainerGroup, "next_bucket", kill_rank0_first)
    started = time.monotonic()
    code = main(["export", str(checkpoint), str(out)])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 3, err[-3000:]
    assert f"export failed: trainer rank 0 (pid {killed['pid']}, node 0 GPU 0) died during next_bucket" in err, err
    assert "Traceback" not in err and "nothing was written" in err
    assert not out.exists() and not (tmp_path / ".exported.partial").exists()
    assert elapsed < 180, elapsed
    deadline = time.monotonic() + 10
    while (left := _ray_children()) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert left == {}


def _victim(run, label: str) -> dict:
    return next(a for a in json.loads((run.dir / "actors.json").read_text()) if a["label"] == label)


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_an_actor_lost_in_the_async_loop_ends_the_run_naming_it(launch_run, how):
    """kill: Ray reports the death at once; stop: the call's deadline (run.hang_timeout_s) does."""
    run = launch_run(f"async-{how}", [*ASYNC, f"run.hang_timeout_s={HANG_S}"])
    run.wait_for_step(2, timeout_s=480)
    victim = _victim(run, "trainer rank 0")
    os.kill(victim["pid"], signal.SIGKILL if how == "kill" else signal.SIGSTOP)
    lost_at = time.monotonic()
    try:
        code, out, err = run.finish(timeout_s=HANG_S + 120)
        elapsed = time.monotonic() - lost_at
    finally:
        if psutil.pid_exists(victim["pid"]):
            os.kill(victim["pid"], signal.SIGCONT)
    assert code == 3, err[-3000:]
    who = f"trainer rank 0 (pid {victim['pid']}, node {victim['node']} GPU {victim['gpu']})"
    if how == "kill":
        assert f"run failed: {who} died during " in err, err[-3000:]
    else:
        assert f"run failed: {who} did not answer " in err and f"(deadline: run.hang_timeout_s={HANG_S})" in err, \
            err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert elapsed < HANG_S + 60, f"the run took {elapsed:.0f} s to end after the trainer was lost"
    assert run.leftover_daemons() == []
