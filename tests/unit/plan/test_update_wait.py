"""The plan's wait of an async weight update at an engine (plan/update_wait.py): the chunk
tail between chunks, one decode step in flight, nothing for colocated runs."""
import pytest

from launcher.plan import make_plan
from launcher.plan.update_wait import IN_FLIGHT_PER_ENGINE, chunk_s, update_wait_s
from tests.shared_compose import compose_shipped


def _wait(overrides):
    cfg = compose_shipped(overrides).config
    timing = make_plan(cfg).timing
    return cfg, timing, update_wait_s(cfg, timing)


def test_between_chunks_waits_for_the_queued_chunks_and_in_flight_for_one_decode_step():
    cfg, timing, (between, basis) = _wait(["recipe=tiny_dapo_async", "algorithm.max_response_len=40"])
    # half a step's 16 groups x 16 samples = 128 sequences, one wave of 40 decode steps
    assert chunk_s(cfg, timing) == pytest.approx(40 * timing.decode_step_s)
    assert between == pytest.approx(IN_FLIGHT_PER_ENGINE * 40 * timing.decode_step_s) and "2 queued chunks" in basis
    _, timing, (in_flight, basis) = _wait(["recipe=tiny_dapo_async", "algorithm.max_response_len=40",
                                           "inference.update_mode=in_flight"])
    assert in_flight == pytest.approx(timing.decode_step_s) and "token boundary" in basis


def test_colocated_runs_have_no_update_wait():
    assert _wait(["recipe=tiny_grpo"])[2] is None
