"""Preemption without Ray: real signals to this process drive driver/loop/preemption.py's state
(first signal: a step deadline; second, or one before the loop runs: StopNow; the deadline
inside a droppable phase: StepDropped); the grace default follows the plan; runtime.py
completes a background checkpoint as soon as every rank's write is over and saves the last
completed step on a stop; exit codes are 128 + the signal."""
import os
import signal
import time
from pathlib import Path

import pytest

from launcher.driver.loop.preemption import Preemption, StepDropped, StopNow
from launcher.driver.loop.runtime import Runtime
from launcher.driver.records.checkpoint import Checkpointer, DriverState
from launcher.exit_codes import ExitCode, of_signal
from launcher.plan import make_plan
from launcher.plan.preemption import STOP_S, checkpoint_write_s, grace_s, rest_of_step_s, save_s
from tests.shared_compose import compose_shipped


def _signal_self(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # the handler runs at the next bytecode boundary; sleep lets it


def test_first_signal_sets_a_step_deadline_and_a_second_stops_at_once():
    preemption = Preemption([signal.SIGUSR1], grace_s=10.0, save_s=4.0, basis="test")
    with preemption.installed():
        preemption.running = True
        _signal_self(signal.SIGUSR1)
        assert preemption.requested and preemption.signum == signal.SIGUSR1
        assert 5.0 < preemption.left_s() <= 6.0 and not preemption.overdue()
        assert preemption.may_start(1.0) and not preemption.may_start(7.0)
        with pytest.raises(StopNow) as stop:
            _signal_self(signal.SIGUSR1)
        assert stop.value.signum == signal.SIGUSR1
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the previous handler is back


def test_a_signal_before_the_loop_runs_stops_at_once():
    preemption = Preemption([signal.SIGUSR1], grace_s=10.0, save_s=4.0, basis="test")
    with preemption.installed(), pytest.raises(StopNow):
        _signal_self(signal.SIGUSR1)


def test_sigterm_left_out_of_the_signals_still_stops_at_once():
    preemption = Preemption([signal.SIGUSR2], grace_s=10.0, save_s=4.0, basis="test")
    with preemption.installed():
        preemption.running = True
        with pytest.raises(StopNow) as stop:
            _signal_self(signal.SIGTERM)
    assert stop.value.signum == signal.SIGTERM


def test_the_deadline_drops_a_droppable_phase_where_it_waits():
    preemption = Preemption([signal.SIGUSR1], grace_s=4.3, save_s=4.0, basis="test")  # 0.3 s for the step
    with preemption.installed():
        preemption.running = True
        started = time.monotonic()
        with pytest.raises(StepDropped), preemption.droppable():
            _signal_self(signal.SIGUSR1)
            time.sleep(5)  # a blocking wait (a chunk of generation): the deadline's signal interrupts it
        assert 0.25 < time.monotonic() - started < 2.0
        with pytest.raises(StepDropped), preemption.droppable():  # entered after the deadline
            pass


def test_the_deadline_outside_a_droppable_phase_lets_the_step_finish(capsys):
    preemption = Preemption([signal.SIGUSR1], grace_s=4.1, save_s=4.0, basis="test")
    with preemption.installed():
        preemption.running = True
        _signal_self(signal.SIGUSR1)
        time.sleep(0.5)  # training: not droppable
    assert "the step deadline passed while the trainers work on the step in flight" in capsys.readouterr().err


def test_exit_codes_are_128_plus_the_signal():
    assert [of_signal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)] == [
        ExitCode.TERMINATED, ExitCode.PREEMPTED_USR1, ExitCode.PREEMPTED_USR2, ExitCode.INTERRUPTED]
    assert (int(ExitCode.TERMINATED), int(ExitCode.PREEMPTED_USR1)) == (143, 138)


@pytest.mark.parametrize("recipe", ["recipe=tiny_grpo", "recipe=dapo_sync", "recipe=dapo_async"])
def test_the_grace_default_covers_the_rest_of_a_step_or_a_chunk_a_write_and_rays_stop(recipe):
    config = compose_shipped([recipe]).config
    plan = make_plan(config)
    seconds, basis = grace_s(config, plan)
    chunk = config.algorithm.max_response_len * plan.timing.decode_step_s
    expected = max(rest_of_step_s(plan), chunk) + plan.timing.swap_s + \
        checkpoint_write_s(plan, config.cluster.gpus_per_node) + STOP_S
    assert expected <= seconds < expected + 10 and seconds % 10 == 0
    assert "run.preemption_grace_s=null" in basis and f"{rest_of_step_s(plan):.0f} s of a step after generation" in basis
    assert STOP_S < save_s(config, plan) < seconds
    given = compose_shipped([recipe, "run.preemption_grace_s=123.5"]).config
    assert grace_s(given, plan) == (123.5, "run.preemption_grace_s=123.5")


class _Ranks:
    """Trainer ranks whose background writes finish when the test says so."""

    def __init__(self):
        self.written, self.saves = False, []

    def call(self, method: str, *args) -> list:
        if method == "save_checkpoint":
            Path(args[0]).mkdir(parents=True)
            (Path(args[0]) / "model.pt").write_bytes(b"weights")
            self.saves.append(args[0])
            return [None]
        if method == "checkpoint_written":
            return [self.written, self.written]
        assert method == "finalize_checkpoint"
        return [0.5, 0.25]

    def answered_within(self, method: str, timeout_s: float):
        return self.call(method) if self.written else None


def _runtime(tmp_path: Path, ranks: _Ranks, every: int = 2) -> Runtime:
    config = compose_shipped(["recipe=tiny_grpo"]).config
    return Runtime(config=config, plan=None, run_dir=tmp_path, trainers=ranks, engines=None, tokenizer=None,
                   stream=None, algorithm=None, logger=None,
                   checkpointer=Checkpointer(tmp_path / "checkpoints", every, keep=2, total_steps=100))


def test_a_background_checkpoint_completes_at_the_first_boundary_after_its_writes(tmp_path):
    ranks = _Ranks()
    rt = _runtime(tmp_path, ranks)
    rt.state = DriverState(step=2, policy_version=2, data_position=8)
    rt.maybe_checkpoint()  # due: written in the background
    partial = tmp_path / "checkpoints" / ".step_000002.partial"
    assert partial.is_dir() and rt.checkpointer.latest() is None
    rt.poll_checkpoint()  # the ranks still write: nothing waits, nothing completes
    assert partial.is_dir() and rt.checkpointer.pending is not None
    ranks.written = True
    rt.poll_checkpoint()
    assert rt.checkpointer.latest() == tmp_path / "checkpoints" / "step_000002" == rt.last_checkpoint
    assert not partial.exists() and rt.checkpoint_stats["checkpoint_write_s"] == 0.5


def test_a_stop_saves_the_last_completed_step_when_the_newest_checkpoint_is_older(tmp_path):
    ranks = _Ranks()
    rt = _runtime(tmp_path, ranks)
    rt.state = DriverState(step=2, policy_version=2, data_position=8)
    rt.maybe_checkpoint()
    rt.state = DriverState(step=3, policy_version=3, data_position=12)
    rt.save_on_stop()  # waits for step 2's write, then writes step 3 at once
    assert [p.name for p in rt.checkpointer.complete()] == ["step_000002", "step_000003"]
    assert rt.last_checkpoint.name == "step_000003"
    saves = len(ranks.saves)
    rt.save_on_stop()  # step 3 is the newest already: nothing more
    assert len(ranks.saves) == saves


def test_an_exit_completes_a_pending_write_only_when_the_ranks_finish_it(tmp_path):
    ranks = _Ranks()
    rt = _runtime(tmp_path, ranks)
    rt.state = DriverState(step=2, policy_version=2, data_position=8)
    rt.maybe_checkpoint()
    rt.complete_write_on_exit(timeout_s=0.1)  # busy or dead ranks: it stays a .partial
    assert rt.checkpointer.latest() is None and rt.checkpointer.pending is not None
    ranks.written = True
    rt.complete_write_on_exit(timeout_s=0.1)
    assert rt.checkpointer.latest().name == "step_000002"


def test_the_run_keys_make_the_runs_preemption():
    from launcher.driver.loop.preemption import make_preemption

    config = compose_shipped(["recipe=tiny_grpo", "run.preemption_signals=[SIGUSR2]", "run.preemption_grace_s=45"]).config
    plan = make_plan(config)
    preemption = make_preemption(config, plan)
    assert preemption.signals == [signal.SIGUSR2] and preemption.grace_s == 45.0
    assert preemption.step_budget_s == pytest.approx(45.0 - save_s(config, plan))
    with preemption.installed():
        assert signal.getsignal(signal.SIGUSR2) == preemption._on_signal  # saves
        assert signal.getsignal(signal.SIGTERM) == preemption._stop_now  # left out: stops at once
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # not the run's
