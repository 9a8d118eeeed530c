"""A run with data.reward_fn: the user's module (on PYTHONPATH) scores every response, and a
reward that raises for some of them costs those responses their reward, not the run."""
import os
import textwrap

import pytest
from launch_helpers import SMALL

pytestmark = pytest.mark.slow

REWARD = textwrap.dedent('''
    def compute_score(data_source, solution_str, ground_truth, extra_info):
        assert data_source == "synthetic_copy" and extra_info == {}
        if ground_truth[0] in "01234":
            raise ZeroDivisionError("no reward for " + ground_truth)
        right = sum(a == b for a, b in zip(solution_str, ground_truth))
        return {"score": right / max(len(solution_str), len(ground_truth), 1), "acc": solution_str == ground_truth}
''')


def test_custom_reward_run_counts_errors_and_finishes(launch_run, tmp_path, monkeypatch):
    (tmp_path / "user_reward_run.py").write_text(REWARD)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    run = launch_run("custom_reward", SMALL + ["run.steps=2", "data.reward_fn=user_reward_run:compute_score"])
    code, out, err = run.finish()
    assert code == 0, err[-3000:]
    metrics = run.metrics()
    assert len(metrics) == 2
    errors = sum(m["reward_errors"] for m in metrics)
    assert errors > 0 and errors % 8 == 0  # whole groups (samples_per_prompt=8) of the raising answers
    assert "reward error (data.reward_fn=user_reward_run:compute_score), scored 0: ZeroDivisionError" in err


def test_unimportable_reward_fn_fails_before_training(launch_run):
    run = launch_run("bad_reward", SMALL + ["run.steps=2", "data.reward_fn=missing_reward_mod_q7:fn"])
    code, out, err = run.finish()
    assert code == 1, out[-2000:] + err[-2000:]  # validation stops it: DATA003, nothing started
    assert "DATA003" in out + err and "missing_reward_mod_q7" in out + err
