"""A step that generated no sample (an async step training on groups queued before it while
none finished) reports its sample means as null, not 0, and every reader of metrics.jsonl
copes: the console line, the curves, wandb, the learning tests' `improvement`."""
import json

import pytest

from launcher.driver.loop.step import SAMPLE_MEANS, generation_summary
from launcher.driver.records.metrics import console_line, wandb_values
from launcher.driver.records.plot import accuracy_panel, series, write_curves
from tests.integration.launch_helpers import improvement


def _row(step: int, reward: float | None) -> dict:
    """A training row as StepLogger.log writes it, with generation_summary's keys."""
    gen = generation_summary([], 0.0) if reward is None else {
        "reward": reward, "accuracy": reward / 2, "response_len": 3.0, "truncated_frac": 0.0}
    return {"step": step, "steps": 4, **gen, "kl": 0.0, "rollout_s": 0.1, "train_s": 0.2, "sync_s": 0.0,
            "tokens_per_s": 0.0, "eta_s": 1.0}


def test_no_groups_give_null_means_and_zero_counts():
    stats = generation_summary([], 1.5)
    assert {key: stats[key] for key in SAMPLE_MEANS} == dict.fromkeys(SAMPLE_MEANS)
    assert (stats["generated_tokens"], stats["groups_generated"], stats["reward_errors"], stats["gen_s"]) == (0, 0, 0, 1.5)
    written = json.loads(json.dumps(_row(2, None)))
    assert "reward" in written and written["reward"] is None  # still a training row (the `reward` marker)


def test_console_line_prints_a_dash_for_a_missing_mean():
    line = console_line(_row(2, None))
    assert line.startswith("step    2/4 | reward - acc - | ") and "| len - |" in line
    assert "reward 0.500 acc 0.25 |" in console_line(_row(3, 0.5))


def test_curves_skip_the_step_without_samples(tmp_path):
    rows = [_row(1, 0.2), _row(2, None), _row(3, 0.6), {"step": 3, "eval/n": 8, "eval/greedy_acc": 0.5}]
    curves = {label: (steps, values) for label, steps, values in accuracy_panel(rows)}
    assert curves["reward"] == ([1, 3], [0.2, 0.6]) and curves["accuracy"] == ([1, 3], [0.1, 0.3])
    assert curves["held-out greedy accuracy"] == ([3], [0.5])
    assert series(rows, "response_len") == ([1, 3], [3.0, 3.0])
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert write_curves(metrics, tmp_path / "curves.png").stat().st_size > 0


def test_wandb_is_not_sent_the_null_means():
    """wandb 0.31 takes a None but then drops the key from the run summary (metrics.py)."""
    sent = wandb_values(_row(2, None))
    assert not set(SAMPLE_MEANS) & set(sent)
    assert sent["groups_generated"] == 0 and sent["step"] == 2  # counts and the rest stay


def test_improvement_skips_steps_without_the_value():
    rows = [_row(1, 0.1), _row(2, None), _row(3, 0.2), _row(4, None), _row(5, 0.9)]
    assert improvement(rows, window=2) == pytest.approx((0.2 + 0.9) / 2 - (0.1 + 0.2) / 2)
