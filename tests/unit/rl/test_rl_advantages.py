"""GRPO advantages and the loss-aggregation weights against hand-computed values."""
import pytest
import torch

from launcher.rl.grpo import group_advantages, token_weights


def test_group_advantages_normalise_within_each_group():
    # group 1: mean 0.25, unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    # group 2: all equal -> zero advantage (nothing to learn)
    adv_B = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), group_size=4)
    assert adv_B[:4].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)
    assert adv_B[4:].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_group_advantages_of_two_samples():
    # mean 0.5, unbiased std of [0, 1] = sqrt(0.5)
    adv_B = group_advantages(torch.tensor([0.0, 1.0]), group_size=2)
    assert adv_B.tolist() == pytest.approx([-0.5 / 0.5**0.5, 0.5 / 0.5**0.5], abs=1e-5)


MASK_BT = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)


def test_token_mean_weights_every_token_of_the_mini_batch_equally():
    expected = torch.tensor([[1 / 3, 1 / 3, 0], [1 / 3, 0, 0]])
    assert torch.allclose(token_weights(MASK_BT, "token_mean", 3, 2), expected)


def test_seq_mean_token_mean_weights_each_sequence_equally():
    expected = torch.tensor([[0.25, 0.25, 0], [0.5, 0, 0]])
    assert torch.allclose(token_weights(MASK_BT, "seq_mean_token_mean", 3, 2), expected)


def test_seq_mean_token_sum():
    expected = torch.tensor([[0.5, 0.5, 0], [0.5, 0, 0]])
    assert torch.allclose(token_weights(MASK_BT, "seq_mean_token_sum", 3, 2), expected)


def test_unknown_aggregation_names_the_key():
    with pytest.raises(ValueError, match="algorithm.loss_agg"):
        token_weights(MASK_BT, "sum", 3, 2)


def test_weights_with_global_normaliser_make_sharded_sums_exact():
    """Data parallelism: two ranks' weighted sums add up to the single-process loss."""
    torch.manual_seed(0)
    loss_BT = torch.randn(4, 5)
    mask_BT = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    tokens, seqs = int(mask_BT.sum()), 4
    for agg in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum"):
        whole = (loss_BT * token_weights(mask_BT, agg, tokens, seqs)).sum()
        parts = sum((loss_BT[r::2] * token_weights(mask_BT[r::2], agg, tokens, seqs)).sum() for r in range(2))
        assert float(parts) == pytest.approx(float(whole), abs=1e-6)
