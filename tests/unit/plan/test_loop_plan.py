"""The step loop's shape in the plan (plan/loop.py), which the driver runs and the plan prices:
async chunks, the in-flight limit and the queue; the wait of an async weight update at an engine
(plan/update_wait.py): the chunk tail between chunks, one decode step in flight, nothing colocated."""
import pytest

from launcher.plan import make_plan
from launcher.plan.update_wait import chunk_s, update_wait_s
from tests.shared_compose import compose_shipped


def _plan(overrides):
    cfg = compose_shipped(overrides).config
    return cfg, make_plan(cfg)


def test_async_chunks_are_half_a_step_over_the_engines_and_the_queue_follows_max_staleness():
    cfg, plan = _plan(["recipe=tiny_dapo_async"])
    loop, alg = plan.loop, cfg.algorithm
    assert loop.is_async and not loop.in_flight_updates and loop.chunks_in_flight_per_engine == 2
    half = alg.prompts_per_step // 2
    assert loop.chunk_groups == min(-(-half // cfg.inference.engines),
                                    cfg.inference.concurrency_per_engine // alg.samples_per_prompt)
    assert loop.queue_steps == min(2, alg.max_staleness) and loop.queue_groups == loop.queue_steps * alg.prompts_per_step
    _, one = _plan(["recipe=tiny_dapo_async", "algorithm.max_staleness=1"])
    assert (one.loop.queue_steps, one.loop.queue_groups) == (1, alg.prompts_per_step)
    assert one.routes.steps_held == 2 and plan.routes.steps_held == 1 + loop.queue_steps


def test_between_chunks_waits_for_the_queued_chunks_and_in_flight_for_one_decode_step():
    cfg, plan = _plan(["recipe=tiny_dapo_async", "algorithm.max_response_len=40"])
    between, basis = update_wait_s(cfg, plan.loop, plan.timing)
    # half a step's 16 groups x 16 samples = 128 sequences, one wave of 40 decode steps
    assert chunk_s(cfg, plan.loop, plan.timing) == pytest.approx(40 * plan.timing.decode_step_s)
    assert between == pytest.approx(2 * 40 * plan.timing.decode_step_s) and "2 queued chunks" in basis
    cfg, plan = _plan(["recipe=tiny_dapo_async", "algorithm.max_response_len=40", "inference.update_mode=in_flight"])
    in_flight, basis = update_wait_s(cfg, plan.loop, plan.timing)
    assert plan.loop.in_flight_updates
    assert in_flight == pytest.approx(plan.timing.decode_step_s) and "token boundary" in basis


def test_colocated_runs_have_no_queue_no_chunks_of_their_own_and_no_update_wait():
    cfg, plan = _plan(["recipe=tiny_grpo"])
    assert not plan.loop.is_async and (plan.loop.chunk_groups, plan.loop.queue_groups) == (0, 0)
    assert update_wait_s(cfg, plan.loop, plan.timing) is None
