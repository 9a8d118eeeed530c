"""A preemption signal loses at most the step in flight (launcher/driver/loop/preemption.py): the
run exits 128 + the signal within its grace, its newest complete checkpoint is its last
logged step, no `.partial` is left, and the resumed sync run matches an uninterrupted one
row for row. Dynamic sampling that finds nothing to learn ends the run (exit 3) after
algorithm.dynamic_sampling.max_empty_steps steps (launcher/driver/loop/no_signal.py).

SIGTERM lands in each phase of a sync step by design, not by luck. The test watches the
run's phase.json (launcher/driver/records/phase.py: a phase starts when the driver starts waiting on
the group that does it) and holds the phase it targets by stopping (SIGSTOP) the actors it
waits on until the driver has printed that the signal arrived: the engines in generation, the
trainer (stopped while generation runs) in training, the engines (stopped while training
runs) in the sync; a checkpoint's pending write lasts through the next step's generation.
That message names the phase the signal arrived in, and the test checks it. A reward that
keeps the driver scoring for 1.6 s makes a signal in generation drop the step. The four cuts
are one run after another, each resuming the one before, then a last run completes: six
launches with the uninterrupted one, where a cut and a resume per phase would take nine.
"""
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest
from launch_helpers import SMALL

pytestmark = pytest.mark.slow

REWARDS = textwrap.dedent('''
    import time

    def slow_copy(data_source, solution_str, ground_truth, extra_info):
        """The copy task's partial credit, 50 ms late: a step's generation and scoring (32
        samples) then lasts 1.6 s, longer than the step budget a signal leaves it."""
        time.sleep(0.05)
        right = sum(a == b for a, b in zip(solution_str, ground_truth))
        return {"score": right / max(len(solution_str), len(ground_truth), 1), "acc": solution_str == ground_truth}

    def never(data_source, solution_str, ground_truth, extra_info):
        return {"score": 0.0, "acc": False}
''')
GRACE_S = 30.5
"""The tiny plan keeps 30 s of the grace for the save and Ray's stop: the step in flight has
0.5 s, so a signal during its generation drops it."""


@pytest.fixture
def rewards_module(tmp_path, monkeypatch):
    (tmp_path / "preemption_rewards_q42.py").write_text(REWARDS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    return "preemption_rewards_q42"


def _comparable(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.endswith("_s")} for m in metrics]


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


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        os.kill(pid, signum)


def _sigterm_while_stopped(run, step: int, phase: str, stopped: list[int], pending: Path | None = None) -> float:
    """Once phase.json says step `step`'s `phase`: SIGTERM, while the actors the phase waits on
    (`stopped`, stopped with SIGSTOP before) hold it until the driver has said where the signal
    arrived, which must be there. `pending`: a `.partial` that must still be there as it is sent.
    Returns when it was sent."""
    try:
        run.wait_for_phase(step, phase)
        run.proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        assert pending is None or pending.is_dir(), f"{pending} was complete before the signal"
        line = run.wait_for_stderr("SIGTERM received in")
        assert f"SIGTERM received in step {step}'s {phase}:" in line, line
    finally:
        _signal_all(stopped, signal.SIGCONT)
    return sent


def _in_generate(run, step: int, pending: Path | None = None) -> float:
    """The engines, stopped once generate starts, hold it; after the signal the slow reward keeps
    the driver scoring past the step budget, so the step is dropped."""
    run.wait_for_phase(step, "generate")
    engines = run.actor_pids("engine")
    _signal_all(engines, signal.SIGSTOP)
    return _sigterm_while_stopped(run, step, "generate", engines, pending)


def _during_a_background_write(run, step: int) -> float:
    """Step `step` - 1's checkpoint stays a `.partial` until the first phase boundary after its
    write, through step `step`'s generation: the hf trainer has written it at once, and the
    driver has it pending as it has the megatron trainer's write thread."""
    return _in_generate(run, step, pending=run.dir / "checkpoints" / f".step_{step - 1:06d}.partial")


def _in_train(run, step: int) -> float:
    """The trainer, offloaded before generate starts and called next in train, is stopped then."""
    run.wait_for_phase(step, "generate")
    trainers = run.actor_pids("trainer")
    _signal_all(trainers, signal.SIGSTOP)
    return _sigterm_while_stopped(run, step, "train", trainers)


def _in_sync(run, step: int) -> float:
    """As _in_train; then the engines, asleep once train starts and called next by the sync, are
    stopped instead of the trainer."""
    run.wait_for_phase(step, "generate")
    trainers, engines = run.actor_pids("trainer"), run.actor_pids("engine")
    _signal_all(trainers, signal.SIGSTOP)
    try:
        run.wait_for_phase(step, "train")
        _signal_all(engines, signal.SIGSTOP)
    finally:
        _signal_all(trainers, signal.SIGCONT)
    return _sigterm_while_stopped(run, step, "sync", engines)


CUTS = [  # (how, the step in flight, whether it is dropped); each run resumes the one before
    (_during_a_background_write, 3, True),  # step 2's periodic checkpoint (every 2 steps)
    (_in_generate, 4, True),
    (_in_train, 4, False),
    (_in_sync, 5, False),
]


def test_sigterm_in_each_phase_loses_at_most_the_step_in_flight_and_the_resumed_run_matches(launch_run,
                                                                                            rewards_module):
    steps = SMALL + ["run.steps=6", "checkpoint.every_steps=2", "run.seed=3", f"data.reward_fn={rewards_module}:slow_copy",
                     f"run.preemption_grace_s={GRACE_S}"]
    whole = launch_run("whole", steps)  # alongside the first cut run: each start is mostly waiting on Ray
    saved = 0
    for cut, step, dropped in CUTS:
        run = launch_run("cut", steps)  # run.resume=auto is the default
        sent = cut(run, step)
        code, out, err = run.finish(timeout_s=GRACE_S + 30)
        assert code == 143 and time.monotonic() - sent < GRACE_S, err[-3000:]
        assert (f"step {step} dropped before its trainers started on it" in err) == dropped, err[-3000:]
        resumed = f"resumed from {run.dir / 'checkpoints' / f'step_{saved:06d}'}"
        assert (resumed in out) == (saved > 0), out[-2000:]
        saved = _assert_lost_at_most_the_step_in_flight(run, err)
        assert saved == (step - 1 if dropped else step) and f"saved step {saved} as" in err, err[-3000:]
    assert whole.finish()[0] == 0
    final = launch_run("cut", steps)
    code, out, err = final.finish()
    assert code == 0, err[-3000:]
    assert f"resumed from {final.dir / 'checkpoints' / f'step_{saved:06d}'}" in out
    assert _comparable(final.metrics()) == _comparable(whole.metrics())


def _held_by_the_trainer(run) -> tuple[int, str]:
    """With the trainer stopped, the async driver's phase once it holds: step N's `train` (or
    its `sync`, which the trainer's export feeds, when the stop caught that)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = run.phase()
        if found["phase"] in ("train", "sync"):
            time.sleep(0.5)
            assert run.phase() == found, f"{found} did not hold with the trainer stopped: {run.phase()}"
            return found["step"], found["phase"]
        time.sleep(0.01)
    raise AssertionError(f"the async driver reached no train or sync with the trainer stopped: {run.phase()}")


def test_sigusr1_stops_the_async_loop_at_a_step_boundary_and_saves_it(launch_run):
    """phase.json names what the async driver waits on; a signal while a step trains (the
    trainer stopped to hold it there) lets that step finish, and it is the one saved."""
    run = launch_run("async_usr1", ["recipe=tiny_dapo_async", *SMALL, "run.steps=200", "checkpoint.every_steps=50"])
    run.wait_for_phase(1, "wait-groups")  # the first groups take seconds to generate
    run.wait_for_step(3)
    trainers = run.actor_pids("trainer")
    _signal_all(trainers, signal.SIGSTOP)
    try:
        step, phase = _held_by_the_trainer(run)
        run.proc.send_signal(signal.SIGUSR1)
        sent = time.monotonic()
        line = run.wait_for_stderr("SIGUSR1 received in")
        assert f"SIGUSR1 received in step {step}'s {phase}:" in line, line
    finally:
        _signal_all(trainers, signal.SIGCONT)
    code, _, err = run.finish(timeout_s=120)
    assert code == 128 + signal.SIGUSR1 and time.monotonic() - sent < 100, err[-3000:]  # the tiny plan's derived grace
    assert _assert_lost_at_most_the_step_in_flight(run, err) == step and f"saved step {step}" in err, err[-3000:]
    assert (run.phase()["step"], run.phase()["phase"]) == (step, "save")


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
