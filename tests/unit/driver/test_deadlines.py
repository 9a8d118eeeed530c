"""The deadline of every driver wait on an actor call (launcher/driver/actors/deadlines.py),
from real plans of real recipes, and the run.hang_timeout_s key that overrides it."""
import functools

import pytest

from launcher.config.compose import compose
from launcher.driver.actors.deadlines import (
    FIRST_CALL_FLOOR_S,
    FLOOR_S,
    HANDED_DOWN_GRACE_S,
    HANDS_DOWN,
    MARGIN,
    TRANSFER_STEP,
    CallDeadlines,
)
from launcher.errors import ConfigError
from launcher.plan import make_plan
from launcher.plan.startup import STARTUP_OVERHEAD_S
from tests.shared_compose import compose_shipped


@functools.cache  # composing and planning is most of each test's time
def _deadlines(*overrides: str) -> tuple[CallDeadlines, object, object]:
    config = compose_shipped(list(overrides)).config
    plan = make_plan(config)
    return CallDeadlines.of_run(config, plan), config, plan


def test_a_tiny_cpu_run_gets_the_floors():
    calls, _, _ = _deadlines("recipe=tiny_grpo")
    for method in ("generate", "train_step", "logprobs", "load_weight_bucket", "wake"):
        assert calls.of(method, first=False).seconds == FLOOR_S
        assert calls.of(method, first=True).seconds == FIRST_CALL_FLOOR_S


def test_a_large_run_follows_the_plans_phase_estimates():
    calls, config, plan = _deadlines("recipe=dapo_sync")
    engine_s = plan.timing.generation_round_s + plan.sync.seconds  # an engine's queue interleaves chunks and updates
    generate = calls.of("generate", first=False)
    assert generate.seconds == pytest.approx(MARGIN * engine_s) and generate.seconds > FLOOR_S
    assert f"the plan's {engine_s:.0f} s generation + weight sync estimate" in generate.basis
    assert calls.of("load_weight_bucket", first=False) == generate
    assert calls.of("train_step", first=False).seconds == pytest.approx(MARGIN * plan.timing.train_s)
    startup = plan.startup.seconds
    assert calls.of("pid", first=True).seconds == pytest.approx(max(FIRST_CALL_FLOOR_S, MARGIN * startup))  # once
    assert calls.of("train_step", first=True).seconds == pytest.approx(
        max(FIRST_CALL_FLOOR_S, MARGIN * (plan.timing.train_s + startup)))
    assert calls.of("offload", first=False).seconds == FLOOR_S  # no phase estimate: the floor


def test_startup_grows_with_the_weights_a_node_reads():
    _, _, small = _deadlines("recipe=tiny_grpo")
    _, _, big = _deadlines("recipe=dapo_sync")
    assert small.startup.seconds == pytest.approx(STARTUP_OVERHEAD_S, abs=1)
    assert big.startup.init_gib_per_gpu > 50 and big.startup.seconds > small.startup.seconds + 2


def test_hang_timeout_replaces_the_steady_deadline_but_not_a_longer_first_call_allowance():
    calls, _, _ = _deadlines("recipe=tiny_grpo", "run.hang_timeout_s=5")
    assert calls.of("generate", first=False).seconds == 5
    assert calls.of("generate", first=False).basis == "run.hang_timeout_s=5"
    assert calls.of("generate", first=True).seconds == FIRST_CALL_FLOOR_S
    tiny, _, _ = _deadlines("recipe=tiny_grpo")
    assert CallDeadlines(tiny.estimates_s, hang_timeout_s=7200).of("pid", first=True).seconds == 7200


def test_the_error_names_actors_call_time_and_basis():
    calls, _, _ = _deadlines("recipe=dapo_sync")
    text = calls.of("generate", first=False).missed(["engine 0 (pid 42, node 0 GPU 1)"], "generate", 4400.4)
    assert text.startswith("engine 0 (pid 42, node 0 GPU 1) did not answer generate within 4400 s (deadline: 3 x the "
                           "plan's 1360 s generation + weight sync estimate, floor 120 s)")
    assert "run.hang_timeout_s" in text


@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_hang_timeout_that_is_not_positive_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError) as err:  # the composition itself refuses: Hydra's compose, not the test cache
        compose(["recipe=tiny_grpo", f"run.hang_timeout_s={value}"])
    finding = err.value.findings[0]
    assert finding.id == "CFG007" and finding.key == "run.hang_timeout_s" and "> 0" in finding.message


@pytest.mark.parametrize("method", HANDS_DOWN)
def test_a_call_that_waits_on_the_engines_outlasts_the_deadline_it_hands_them(method):
    """Trainer rank 0's transfer steps on the engines end first, so the lost engine is named."""
    for overrides in (("recipe=dapo_sync",), ("recipe=tiny_grpo", "run.hang_timeout_s=10")):
        calls, _, _ = _deadlines(*overrides)
        for first in (False, True):
            inner, outer = calls.of(TRANSFER_STEP, first), calls.of(method, first)
            assert outer.seconds == inner.seconds + HANDED_DOWN_GRACE_S
            assert outer.basis == f"{inner.basis}, + {HANDED_DOWN_GRACE_S:.0f} s for the engines' own deadline"
