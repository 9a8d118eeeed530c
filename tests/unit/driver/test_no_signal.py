"""Dynamic sampling that finds nothing to learn (driver/loop/no_signal.py): a short step is said, and
max_empty_steps steps in a row without a kept group (or their worth of groups in the async loop)
end the run with the pass rate and the fix that fits it."""
from types import SimpleNamespace

import pytest

from launcher.driver.loop.no_signal import NoSignalError, NoSignalWatch
from tests.shared_compose import compose_shipped

ALG = ["recipe=tiny_grpo", "algorithm.name=dapo", "algorithm.dynamic_sampling.enabled=true",
       "algorithm.prompts_per_step=4", "algorithm.mini_batch_prompts=4", "algorithm.samples_per_prompt=2",
       "algorithm.dynamic_sampling.max_regenerations=1"]


def _groups(n: int, correct: bool) -> list:
    return [SimpleNamespace(correct=[correct, correct], task_rewards=[float(correct)] * 2) for _ in range(n)]


def _watch(*overrides: str) -> NoSignalWatch:
    return NoSignalWatch(compose_shipped([*ALG, *overrides]).config.algorithm)


def test_a_short_step_is_said_and_empty_steps_in_a_row_end_the_run(capsys):
    watch = _watch("algorithm.dynamic_sampling.max_empty_steps=2")
    watch.sync_step(1, kept=4, rounds=1, seen=_groups(4, False))
    assert capsys.readouterr().out == ""
    watch.sync_step(2, kept=0, rounds=2, seen=_groups(8, False))
    watch.sync_step(3, kept=1, rounds=2, seen=_groups(8, False))  # trained on one: the count starts again
    assert "step 3: dynamic sampling kept 1 of 4 groups after 2 round(s)" in capsys.readouterr().out
    watch.sync_step(4, kept=0, rounds=2, seen=_groups(8, False))
    with pytest.raises(NoSignalError) as err:
        watch.sync_step(5, kept=0, rounds=2, seen=_groups(8, False))
    message = str(err.value)
    assert "kept no group for 2 steps in a row (up to step 5)" in message
    assert "pass rate over those 16 groups: 0.0% of 32 samples" in message and "model.hf_path" in message
    assert "step 5: dynamic sampling kept 0 of 4 groups after 2 round(s) of generation (8 groups, 0.0% of samples " \
           "passed): trained on none (no update)" in capsys.readouterr().out


def test_every_sample_right_asks_for_harder_data():
    watch = _watch("algorithm.dynamic_sampling.max_empty_steps=1")
    with pytest.raises(NoSignalError, match=r"100\.0% of 16 samples .* train on harder data"):
        watch.sync_step(1, kept=0, rounds=2, seen=_groups(8, True))


def test_zero_never_ends_the_run():
    watch = _watch("algorithm.dynamic_sampling.max_empty_steps=0")
    for step in range(1, 50):
        watch.sync_step(step, kept=0, rounds=2, seen=_groups(8, False))
        watch.async_groups(_groups(8, False), [])


def test_the_async_loop_ends_after_the_groups_of_the_limits_steps_with_their_rounds():
    watch = _watch("algorithm.dynamic_sampling.max_empty_steps=2")  # 2 x 4 prompts x 2 rounds = 16 groups
    watch.async_groups(_groups(15, False), [])
    kept = _groups(1, True)
    watch.async_groups(kept, kept)  # one kept: the count starts again
    watch.async_groups(_groups(15, False), [])
    with pytest.raises(NoSignalError, match=r"16 groups in a row \(the groups of 2 steps with their 2 round"):
        watch.async_groups(_groups(1, False), [])
