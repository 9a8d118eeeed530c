"""A preemption signal loses at most the step in flight (launcher/driver/preemption.py): the
run exits 128 + the signal within its grace, its newest complete checkpoint is its last
logged step, no `.partial` is left, and the resumed sync run matches an uninterrupted one
row for row. Dynamic sampling that finds nothing to learn ends the run (exit 3) after
algorithm.dynamic_sampling.max_empty_steps steps (launcher/driver/no_signal.py)."""
import os
import signal
import textwrap
import time

import pytest
from launch_helpers import SMALL

pytestmark = pytest.mark.slow

REWARDS = textwrap.dedent('''
    import time

    def slow_copy(data_source, solution_str, ground_truth, extra_info):
        """The copy task's partial credit, 20 ms late: a step is then mostly generation and
        scoring, the part a signal's deadline drops."""
        time.sleep(0.02)
        right = sum(a == b for a, b in zip(solution_str, ground_truth))
        return {"score": right / max(len(solution_str), len(ground_truth), 1), "acc": solution_str == ground_truth}

    def never(data_source, solution_str, ground_truth, extra_info):
        return {"score": 0.0, "acc": False}
''')
GRACE_S = 31
"""The tiny plan keeps 30 s of the grace for the save and Ray's stop: the step in flight has
about 1 s, so a signal during its generation drops it."""


@pytest.fixture
def rewards_module(tmp_path, monkeypatch):
    (tmp_path / "preemption_rewards_q42.py").write_text(REWARDS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    return "preemption_rewards_q42"


def _comparable(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.endswith("_s")} for m in metrics]


def _stopped_by(run, signum: int, after_step: int) -> tuple[str, float]:
    """Send `signum` once the run logged `after_step`; (stderr, seconds until it exited)."""
    run.wait_for_step(after_step)
    run.proc.send_signal(signum)
    sent = time.monotonic()
    code, _, err = run.finish(timeout_s=GRACE_S + 30)
    assert code == 128 + signum, err[-3000:]
    return err, time.monotonic() - sent


def _assert_lost_at_most_the_step_in_flight(run, err: str) -> int:
    """The newest checkpoint is the last logged step, complete, and nothing unfinished is left."""
    last = run.metrics()[-1]["step"]
    folder = run.dir / "checkpoints"
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == [], "a .partial was left"
    newest = max(p.name for p in folder.iterdir())
    assert newest == f"step_{last:06d}" and (folder / newest / "COMPLETE").exists(), err[-3000:]
    assert str(folder / newest) in err and "run.resume=auto" in err, err[-3000:]
    assert run.leftover_daemons() == []
    return last


def test_sigterm_saves_the_last_step_and_the_resumed_run_matches_an_uninterrupted_one(launch_run, rewards_module):
    steps = SMALL + ["run.steps=6", "checkpoint.every_steps=4", "run.seed=3", f"data.reward_fn={rewards_module}:slow_copy"]
    whole = launch_run("whole", steps)  # alongside the cut run: each start is mostly waiting on Ray
    cut = launch_run("cut", steps + [f"run.preemption_grace_s={GRACE_S}"])
    err, took_s = _stopped_by(cut, signal.SIGTERM, after_step=2)
    assert whole.finish()[0] == 0
    assert took_s < GRACE_S, err[-3000:]
    last = _assert_lost_at_most_the_step_in_flight(cut, err)
    assert last < 6, "the run finished before the signal"
    assert f"step {last + 1} dropped before its trainers started on it" in err or f"saved step {last}" in err
    resumed = launch_run("cut", steps)  # run.resume=auto is the default
    code, out, err = resumed.finish()
    assert code == 0, err[-3000:]
    assert f"resumed from {cut.dir / 'checkpoints' / f'step_{last:06d}'}" in out
    assert _comparable(resumed.metrics()) == _comparable(whole.metrics())


def test_sigusr1_stops_the_async_loop_at_a_step_boundary_and_saves_it(launch_run):
    run = launch_run("async_usr1", ["recipe=tiny_dapo_async", *SMALL, "run.steps=200", "checkpoint.every_steps=50"])
    err, took_s = _stopped_by(run, signal.SIGUSR1, after_step=3)
    assert took_s < 100, err[-3000:]  # the tiny plan's derived grace
    last = _assert_lost_at_most_the_step_in_flight(run, err)
    assert f"saved step {last}" in err


def test_dynamic_sampling_without_signal_ends_the_run_after_max_empty_steps(launch_run, rewards_module):
    run = launch_run("no_signal", SMALL + [
        "run.steps=20", "checkpoint.every_steps=1", "algorithm.name=dapo", "algorithm.dynamic_sampling.enabled=true",
        "algorithm.dynamic_sampling.max_regenerations=1", "algorithm.dynamic_sampling.max_empty_steps=2",
        f"data.reward_fn={rewards_module}:never"])
    code, out, err = run.finish()
    assert code == 3, err[-3000:]
    rows = run.metrics()
    assert [(r["step"], r["groups_kept"], r["groups_asked"], r["rounds"]) for r in rows] == [(1, 0, 4, 2), (2, 0, 4, 2)]
    assert "step 2: dynamic sampling kept 0 of 4 groups after 2 round(s)" in out
    assert "dynamic sampling kept no group for 2 steps in a row" in err
    assert "pass rate over those 16 groups: 0.0% of 128 samples" in err
    assert "algorithm.dynamic_sampling.max_empty_steps=2" in err
    # The failure path completed the last step's background write.
    assert (run.dir / "checkpoints" / "step_000002" / "COMPLETE").exists()
    assert not any(p.name.startswith(".") for p in (run.dir / "checkpoints").iterdir())
