"""run.rollout_checks' bounds (launcher/driver/loop/rollout_health.py): warn once, stop at the
stop_after_steps-th step in a row, a step back under the bound resets the count, the counts live
in the driver state (a resume goes on counting), and a rule refuses a window the run cannot fill."""
import pytest

from launcher.config.compose import compose
from launcher.driver.loop.canary import RolloutCheckError
from launcher.driver.loop.rollout_health import GENERATION_KEYS, TRAINING_KEYS, HealthWatch
from launcher.driver.records.checkpoint import DriverState


class _Rt:
    def __init__(self, state=None):
        self.state = state or DriverState()


def _watch(*overrides, state=None):
    cfg = compose(["recipe=tiny_grpo", *overrides]).config.run.rollout_checks
    return HealthWatch(cfg, _Rt(state))


def test_warns_once_and_stops_on_the_second_step_in_a_row(capsys):
    watch = _watch()
    watch.check(1, {"collapse_frac": 0.6, "repeat_ngram_frac": 0.1}, GENERATION_KEYS)
    watch.check(2, {"collapse_frac": 0.1}, GENERATION_KEYS)  # back under stop: the count restarts
    watch.check(3, {"collapse_frac": 0.7}, GENERATION_KEYS)
    out = capsys.readouterr().out
    assert out.count("warning:") == 1 and "warning: step 1: collapse_frac 0.6 > run.rollout_checks.collapse_frac.warn=0.05" in out
    with pytest.raises(RolloutCheckError, match=r"step 4: collapse_frac 0.9 > .*stop=0.5 for 2 steps in a row.*"
                                                r"samples were not trained on"):
        watch.check(4, {"collapse_frac": 0.9}, GENERATION_KEYS)


def test_null_values_leave_the_count_and_null_bounds_never_stop():
    watch = _watch("run.rollout_checks.stop_after_steps=3", "run.rollout_checks.rollout_kl.stop=null")
    for step in range(1, 6):
        watch.check(step, {"rollout_kl": 9.0, "logprob_abs_diff_mean": None}, TRAINING_KEYS)
    watch.check(6, {"logprob_abs_diff_mean": 2.0}, TRAINING_KEYS)
    watch.check(7, {"logprob_abs_diff_mean": None}, TRAINING_KEYS)
    watch.check(8, {"logprob_abs_diff_mean": 2.0}, TRAINING_KEYS)
    with pytest.raises(RolloutCheckError, match="logprob_abs_diff_mean 2 > .* for 3 steps in a row.*after its update"):
        watch.check(9, {"logprob_abs_diff_mean": 2.0}, TRAINING_KEYS)


def test_a_resumed_run_counts_on_from_the_checkpoint():
    state = DriverState(step=4, checks_in_a_row={"nonfinite_logprobs": 1})
    with pytest.raises(RolloutCheckError, match="nonfinite_logprobs 3 > run.rollout_checks.nonfinite_logprobs.stop=0.0"):
        _watch(state=state).check(5, {"nonfinite_logprobs": 3}, GENERATION_KEYS)


class _Stream:
    def take(self, position, n):
        from launcher.rl.tasks import Problem

        return [Problem(f"p{position + i}", "a") for i in range(n)]


class _Tokenizer:
    def encode(self, text):
        return [ord(c) % 50 + 10 for c in text]


def _canary(*overrides):
    from launcher.driver.loop.canary import Canary

    rt = _Rt()
    rt.config = compose(["recipe=tiny_grpo", *overrides]).config
    rt.stream, rt.tokenizer = _Stream(), _Tokenizer()
    return Canary(rt)


def test_the_canary_bound_is_relative_to_the_first_gap_only_in_the_colocated_loop():
    colocated = _canary()
    assert colocated.limit()[0] == 0.5  # before a first gap: max_gap
    colocated.baseline = 1e-7  # fp32 on CPU
    bound, basis = colocated.limit()
    assert bound == pytest.approx(0.1 + 1e-6) and "relative_to_first=10.0" in basis
    colocated.baseline = 0.2  # 10 x 0.2 + 0.1 is past max_gap: max_gap holds
    assert colocated.limit() == (0.5, "run.rollout_checks.canary.max_gap=0.5")
    asynchronous = _canary("recipe=tiny_dapo_async")
    asynchronous.baseline = 1e-7  # the trainer may be an update ahead at a check: no relative bound
    assert asynchronous.limit()[0] == 0.5
    off = _canary("run.rollout_checks.canary.relative_to_first=0")
    off.baseline = 1e-7
    assert off.limit()[0] == 0.5


def test_a_deferred_stop_counts_into_the_state_now_and_raises_after_the_row():
    state = DriverState(step=2, checks_in_a_row={"rollout_kl": 1})
    watch = _watch(state=state)
    watch.check(3, {"rollout_kl": 0.9, "logprob_abs_diff_mean": 0.01}, TRAINING_KEYS, defer=True)
    assert state.checks_in_a_row == {"rollout_kl": 2, "logprob_abs_diff_mean": 0}  # what step 3's checkpoint holds
    with pytest.raises(RolloutCheckError, match="step 3: rollout_kl 0.9"):
        watch.raise_pending()
    watch.raise_pending()  # raised once
