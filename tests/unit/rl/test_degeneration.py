"""The degeneration signs of a step's samples (launcher/rl/degeneration.py): a healthy random
sample reads ~0, the failures they stand for read high."""
import math
import random

import pytest

from launcher.driver.loop.step import generation_summary
from launcher.rl.degeneration import collapsed, degeneration_stats, repeated_ngrams


def test_repeated_ngrams_count_every_4gram_after_its_first_time():
    assert repeated_ngrams([1, 2, 3, 4, 1, 2, 3, 4]) == (1, 5)  # (1,2,3,4) twice; 5 4-grams
    assert repeated_ngrams([5] * 10) == (6, 7)
    assert repeated_ngrams([1, 2, 3]) == (0, 0)


@pytest.mark.parametrize("tokens, expected", [
    ([0] * 8, True),                       # the wake-with-garbage-state failure: id 0 to the end
    ([3, 9, 4] + [7] * 9, True),           # a tail of one id over half the response
    ([7] * 7, False),                      # too short to call
    ([3, 9, 4, 1, 2, 8, 6, 5] + [7] * 7, False),  # 7 of 15: under half
    (list(range(20)), False),
])
def test_collapse_is_one_id_to_the_end(tokens, expected):
    assert collapsed(tokens) is expected


def test_healthy_and_degenerate_samples():
    rng = random.Random(0)
    healthy = [[rng.randrange(50) for _ in range(32)] for _ in range(16)]
    stats = degeneration_stats(healthy, [[-1.0] * 32] * 16)
    assert stats["repeat_ngram_frac"] < 0.01 and stats["collapse_frac"] == 0 and stats["nonfinite_logprobs"] == 0
    broken = degeneration_stats([[0] * 32] * 4, [[math.nan] * 31 + [-math.inf]] * 4)
    assert broken == {"repeat_ngram_frac": pytest.approx(28 / 29), "collapse_frac": 1.0, "nonfinite_logprobs": 128}
    assert degeneration_stats([], []) == {"repeat_ngram_frac": None, "collapse_frac": None, "nonfinite_logprobs": 0}


def test_a_step_row_carries_them():
    from launcher.driver.loop.rollout import Group
    from launcher.rl.tasks import Problem

    group = Group(Problem("p", "a"), [1], [[4] * 10, [1, 2, 3]], [[-0.5] * 10, [-1.0, math.nan, -1.0]], [[0] * 10, [0] * 3],
                  0, [0.0, 1.0], [0.0, 1.0], [False, True])
    row = generation_summary([group], 1.0)
    assert row["collapse_frac"] == 0.5 and row["nonfinite_logprobs"] == 1 and row["repeat_ngram_frac"] == 6 / 7
