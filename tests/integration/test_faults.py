"""Resumption matches an uninterrupted run step for step; a crashed actor ends the run
with a clear error, no Ray processes left, and an intact last checkpoint."""
import json
import os
import signal

import pytest
import torch
from launch_helpers import SMALL

pytestmark = pytest.mark.slow
STEPS = ["run.steps=10", "checkpoint.every_steps=2", "run.seed=3"]


def _comparable(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.endswith("_s")} for m in metrics]


def test_resumed_run_matches_uninterrupted_run(launch_run):
    whole = launch_run("whole", SMALL + STEPS)
    assert whole.finish()[0] == 0
    cut = launch_run("cut", SMALL + STEPS)
    cut.wait_for_step(5)
    cut.interrupt()
    code, _, err = cut.finish()
    assert code == 130, err[-2000:]
    assert "interrupted" in err
    assert cut.leftover_daemons() == []
    assert len(cut.metrics()) < 10, "the run finished before it could be interrupted"
    resumed = launch_run("cut", SMALL + STEPS + ["run.resume=auto"])
    code, out, err = resumed.finish()
    assert code == 0, err[-3000:]
    assert "resumed from" in out
    assert _comparable(resumed.metrics()) == _comparable(whole.metrics())


def test_crashed_trainer_rank_gives_clear_error_and_keeps_checkpoint(launch_run):
    run = launch_run("crash", SMALL + ["run.steps=200", "checkpoint.every_steps=2"])
    run.wait_for_step(3)
    victim = next(a for a in json.loads((run.dir / "actors.json").read_text()) if a["label"] == "trainer rank 1")
    os.kill(victim["pid"], signal.SIGKILL)
    code, _, err = run.finish()
    assert code == 3, err[-3000:]
    assert f"trainer rank 1 (pid {victim['pid']}, node 0 GPU 1) died" in err
    assert "Last checkpoint:" in err
    assert run.leftover_daemons() == []
    done = sorted((run.dir / "checkpoints").glob("step_*"))
    assert done, "no checkpoint survived"
    last = done[-1]
    assert (last / "COMPLETE").exists()
    assert json.loads((last / "driver.json").read_text())["step"] == int(last.name.removeprefix("step_"))
    assert torch.load(last / "trainer" / "model.pt")
    assert torch.load(last / "trainer" / "optimizer.pt")["state"]
