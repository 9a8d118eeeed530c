"""benchmarks/in_flight_updates.py's reward curve: both update modes' mean reward per block of
steps, lined up by step range, so the two curves compare at equal steps (issue 44)."""
import math

from benchmarks.in_flight_updates import reward_curve, tables


def _rows(rewards: list[float | None], groups: list[int] | None = None) -> list[dict]:
    groups = groups or [2] * len(rewards)
    return [{"step": i + 1, "reward": r, "groups_generated": g} for i, (r, g) in enumerate(zip(rewards, groups, strict=True))]


def test_blocks_by_step_range_the_last_one_short_then_the_last_steps():
    curve = reward_curve(_rows([0.0, 0.2, 0.4, 0.6, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]), block=4, last=3)
    assert list(curve) == ["1-4", "5-8", "9-10", "last 3"]
    assert [round(v, 6) for v in curve.values()] == [0.3, 0.4, 0.95, 0.866667]


def test_a_step_that_generated_no_group_does_not_pull_its_block_to_zero():
    """The async loop logs a null reward for a step trained on queued groups while none finished."""
    curve = reward_curve(_rows([0.9, None, 0.6, None], groups=[1, 0, 2, 0]), block=2, last=1)
    assert curve["1-2"] == 0.9 and curve["3-4"] == 0.6
    assert math.isnan(curve["last 1"])


def test_a_mode_that_stopped_short_shows_a_dash_where_the_other_has_steps():
    long, short = reward_curve(_rows([0.1] * 4), block=2, last=2), reward_curve(_rows([0.3] * 2), block=2, last=2)
    summary = dict.fromkeys(["wall_s", "idle_s", "idle_share", "sync_s", "staleness_mean", "token_staleness_mean",
                             "version_span_mean", "version_span_max", "dropped_stale", "response_len"], 1)
    text = tables({"between_chunks": summary, "in_flight": summary}, {"between_chunks": long, "in_flight": short})
    assert "| 1-2 | 0.100 | 0.300 |" in text
    assert "| 3-4 | 0.100 | - |" in text
    assert "| last 2 | 0.100 | 0.300 |" in text
