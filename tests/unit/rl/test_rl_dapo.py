"""DAPO's dynamic sampling filter and soft overlong penalty by hand."""
import pytest
import torch

from launcher.rl.algorithm import make_algorithm
from launcher.rl.dapo import has_signal, overlong_penalty_B
from tests.shared_compose import compose_shipped


def test_overlong_penalty_is_linear_inside_the_buffer():
    # max 10, buffer 4: free up to 6, then -1/4 per token, -1 at 10
    lengths_B = torch.tensor([3, 6, 7, 8, 10])
    assert overlong_penalty_B(lengths_B, 10, 4, 1.0).tolist() == pytest.approx([0, 0, -0.25, -0.5, -1.0])


def test_overlong_penalty_scales_and_turns_off():
    assert overlong_penalty_B(torch.tensor([10]), 10, 4, 0.5).tolist() == [-0.5]
    assert overlong_penalty_B(torch.tensor([10]), 10, 0, 1.0).tolist() == [0.0]


def test_groups_with_identical_rewards_have_no_signal():
    assert not has_signal(torch.tensor([1.0, 1.0, 1.0]))
    assert not has_signal(torch.tensor([0.0, 0.0]))
    assert has_signal(torch.tensor([0.0, 0.5, 0.0]))


def test_dapo_from_recipe_filters_and_shapes():
    cfg = compose_shipped(["recipe=tiny_dapo_async", "algorithm.overlong.buffer_len=1"]).config
    dapo = make_algorithm(cfg.algorithm)
    assert not dapo.keep_group(torch.tensor([1.0, 1.0]))
    assert dapo.keep_group(torch.tensor([1.0, 0.0]))
    # max_response_len 2, buffer 1: a 2-token response loses the whole penalty (1.0)
    assert dapo.shape_rewards(torch.tensor([1.0, 1.0]), torch.tensor([1, 2])).tolist() == [1.0, 0.0]


def test_grpo_keeps_every_group_and_leaves_rewards_alone():
    grpo = make_algorithm(compose_shipped([]).config.algorithm)
    assert grpo.keep_group(torch.tensor([1.0, 1.0]))
    assert grpo.shape_rewards(torch.tensor([1.0]), torch.tensor([99])).tolist() == [1.0]


def test_step_metrics_count_truncated_and_penalised_responses():
    """What the DAPO recipe's curves show: responses cut without EOS (truncated_frac) and
    those the overlong penalty shaped (overlong_penalized_frac, overlong_penalty_mean)."""
    from launcher.contract.messages import Generation
    from launcher.driver.loop.rollout import score_group
    from launcher.driver.loop.step import generation_summary
    from launcher.rl.tasks import TASKS, Problem
    from launcher.rl.tokenizer import CharTokenizer

    cfg = compose_shipped(["recipe=tiny_dapo_async", "algorithm.max_response_len=4", "algorithm.overlong.buffer_len=1",
                           "algorithm.overlong.penalty=0.5"]).config
    tok = CharTokenizer(64)
    responses = [tok.encode("57") + [tok.eos_id], tok.encode("5777"), tok.encode("5778")]
    gen = Generation(tokens=responses, logprobs=[[0.0] * len(r) for r in responses],
                     finished=[True, False, False], policy_version=0, token_versions=[[0] * len(r) for r in responses])
    group = score_group(Problem("c57=", "57"), tok.encode("c57="), gen, range(3), TASKS.get("synthetic_copy"), tok,
                        make_algorithm(cfg.algorithm))
    assert group.truncated == 2 and group.rewards[1] == pytest.approx(group.task_rewards[1] - 0.5)
    stats = generation_summary([group], 0.0)
    assert stats["truncated_frac"] == pytest.approx(2 / 3) and stats["overlong_penalized_frac"] == pytest.approx(2 / 3)
    assert stats["overlong_penalty_mean"] == pytest.approx(-(0.5 + 0.5) / 3)  # a 3-token answer is not in the buffer
