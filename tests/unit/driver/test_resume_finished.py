"""run.resume=auto on a run that already reached run.steps: a clear 'nothing to do', exit 0,
and no Ray started (a resubmitted sweep skips its finished points instead of redoing them)."""
import json
import sys

from launcher.driver.launch import launch
from launcher.driver.records.checkpoint import DONE_MARK, DriverState
from launcher.plan import make_plan
from tests.shared_compose import compose_shipped


def _finished_checkpoint(run_dir, step: int):
    path = run_dir / "checkpoints" / f"step_{step:06d}"
    path.mkdir(parents=True)
    (path / "driver.json").write_text(json.dumps(DriverState(step=step).__dict__))
    (path / DONE_MARK).write_text("")
    return path


def test_finished_run_is_not_restarted(tmp_path, capsys):
    composed = compose_shipped(["recipe=tiny_grpo", "run.steps=4"])
    checkpoint = _finished_checkpoint(tmp_path, step=4)
    assert launch(composed, make_plan(composed.config), tmp_path) == 0
    out = capsys.readouterr().out
    assert "nothing to do" in out and "run.steps=4" in out and str(checkpoint) in out
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
