"""run.resume=auto through the launcher and real trainer actors: a newest checkpoint that
the trainer ranks cannot load (its load_checkpoint raises inside the actors) gives way to
the one before, with a line naming it and why; the `.partial` of an interrupted write and
a torn last metrics line left by the first run do not get in the way."""
import pytest
import torch
from launch_helpers import SMALL

from launcher.driver.records.checkpoint import damage

pytestmark = pytest.mark.slow
CHECKPOINTS = ["checkpoint.every_steps=2", "checkpoint.keep=3", "run.seed=5"]


def test_auto_resume_falls_back_past_a_checkpoint_the_trainers_cannot_load(launch_run):
    first = launch_run("fallback", SMALL + CHECKPOINTS + ["run.steps=4"])
    code, _, err = first.finish()
    assert code == 0, err[-3000:]
    checkpoints = first.dir / "checkpoints"
    newest, model = checkpoints / "step_000004", checkpoints / "step_000004" / "trainer" / "model.pt"
    model.write_bytes(b"\0" * model.stat().st_size)  # right size, so only the trainers' load can tell
    unfinished = checkpoints / ".step_000006.partial"
    (unfinished / "trainer").mkdir(parents=True)
    with (first.dir / "metrics.jsonl").open("a") as f:
        f.write('{"step": 5, "rew')

    resumed = launch_run("fallback", SMALL + CHECKPOINTS + ["run.steps=6", "run.resume=auto"])
    code, out, err = resumed.finish()
    assert code == 0, err[-3000:]
    assert (f"skipping {newest}: a trainer rank could not load it (DamagedCheckpointError: {model} does not match "
            "the size and crc32 its writer recorded") in err  # the integrity record tells, before torch.load
    assert f"resumed from {checkpoints / 'step_000002'} (step 2)" in out
    assert f"removed {unfinished}" in err and not unfinished.exists()
    # Line 1 is the first run's startup row, lines 2-5 its steps, line 6 the torn one.
    assert "metrics.jsonl: dropped line 6, cut short or damaged" in err
    assert [m["step"] for m in resumed.metrics()] == [1, 2, 3, 4, 5, 6]
    assert damage(newest) is None and torch.load(model, weights_only=True)  # step 4 written again, whole
