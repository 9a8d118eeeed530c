"""Held-out evaluation through Ray (tiny_grpo, hf engines): eval rows at the right steps of
metrics.jsonl and curves.png, training unchanged by them, resume, and `python -m launcher
eval` repeating a run's numbers from its checkpoint."""
import json

import pytest
from launch_helpers import SMALL

from launcher.driver.records.plot import accuracy_panel

pytestmark = pytest.mark.slow
BASE = ["run.steps=4", "checkpoint.every_steps=2", "run.seed=3", "run.eval_problems=16"]
EVAL = ["run.eval_every_steps=2", "run.eval_before_train=true"]


def _comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith("_s") and k != "steps"} for r in rows]


def _kinds(rows: list[dict]) -> list[tuple[int, bool]]:
    return [(r["step"], "eval/n" in r) for r in rows]


def test_evaluations_logged_resumed_and_repeated_by_the_eval_command(launch_run, cli):
    whole = launch_run("whole", SMALL + BASE + EVAL)
    code, out, err = whole.finish()
    assert code == 0, err[-3000:]
    rows = whole.metrics()
    assert _kinds(rows) == [(0, True), (1, False), (2, False), (2, True), (3, False), (4, False), (4, True)]
    evals = [r for r in rows if "eval/n" in r]
    assert [r["eval/policy_version"] for r in evals] == [0, 2, 4]
    assert all(r["eval/n"] == 16 and r["eval/k"] == 4 for r in evals)
    assert "eval    2/4 | greedy acc" in out
    assert (whole.dir / "curves.png").stat().st_size > 0
    held_out = {label: steps for label, steps, _ in accuracy_panel(rows)}
    assert held_out["held-out greedy accuracy"] == held_out["held-out mean@k accuracy"] == [0, 2, 4]

    # Steps 1-2 without evaluation, then resumed from checkpoint 2 with it: the training rows
    # equal the evaluated run's (evaluation changes no training number), and checkpoint 2 is
    # evaluated at the resume with exactly the numbers the uninterrupted run logged.
    cut = launch_run("cut", SMALL + BASE + ["run.steps=2"])
    assert cut.finish()[0] == 0
    resumed = launch_run("cut", SMALL + BASE + EVAL)
    code, out, err = resumed.finish()
    assert code == 0, err[-3000:]
    assert "resumed from" in out
    assert _comparable(resumed.metrics()) == _comparable(rows[1:])

    # The checkpoint scored on its own: the same numbers as the run's step-4 evaluation.
    done = cli("eval", str(whole.dir / "checkpoints" / "step_000004"), "--format", "json", timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    scored = json.loads(done.stdout.strip().splitlines()[-1])
    assert "held-out" in scored.pop("source") and scored.pop("checkpoint").endswith("step_000004")
    assert _comparable([scored]) == _comparable([rows[-1]])


def test_async_evaluation_scores_exactly_the_version_pushed_after_its_step(launch_run, cli):
    """The async loop sends step 2's evaluation behind update 2 while training goes on: the
    numbers are those of checkpoint 2's weights, scored on their own."""
    run = launch_run("async", ["recipe=tiny_dapo_async", *BASE, "run.eval_every_steps=2"])
    code, _, err = run.finish()
    assert code == 0, err[-3000:]
    rows = run.metrics()
    assert _kinds(rows) == [(1, False), (2, False), (2, True), (3, False), (4, False), (4, True)]
    done = cli("eval", str(run.dir / "checkpoints" / "step_000002"), "--format", "json", timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    scored = json.loads(done.stdout.strip().splitlines()[-1])
    assert _comparable([{k: v for k, v in scored.items() if k not in ("source", "checkpoint")}]) == \
        _comparable([rows[2]])
