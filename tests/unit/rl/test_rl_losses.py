"""The PPO clipped loss of GRPO and DAPO (clip-higher, dual clip, k3 KL) by hand."""
import math

import pytest
import torch

from launcher.rl.algorithm import LossInputs
from launcher.rl.dapo import Dapo
from launcher.rl.grpo import Grpo, clipped_pg_BT, k3_kl_BT


def _pg(ratio: float, adv: float, low=0.2, high=0.2, dual=None) -> float:
    logp = torch.tensor([[math.log(ratio)]])
    pg_BT, _ = clipped_pg_BT(logp, torch.zeros(1, 1), torch.tensor([[adv]]), low, high, dual)
    return float(pg_BT)


def test_positive_advantage_is_clipped_above():
    assert _pg(1.5, 1.0) == pytest.approx(-1.2)   # min(1.5, 1.2) * A, as a loss
    assert _pg(0.5, 1.0) == pytest.approx(-0.5)   # below the range: unclipped (pessimistic)


def test_negative_advantage_is_clipped_below():
    assert _pg(0.5, -1.0) == pytest.approx(0.8)   # max(0.5, 0.8) * -A
    assert _pg(1.5, -1.0) == pytest.approx(1.5)


def test_clip_higher_lets_positive_ratios_grow_further():
    assert _pg(1.3, 1.0, high=0.28) == pytest.approx(-1.28)
    assert _pg(1.3, 1.0, high=0.2) == pytest.approx(-1.2)


def test_dual_clip_bounds_negative_advantage_loss():
    assert _pg(5.0, -1.0) == pytest.approx(5.0)
    assert _pg(5.0, -1.0, dual=3.0) == pytest.approx(3.0)
    assert _pg(5.0, 1.0, dual=3.0) == pytest.approx(-1.2)  # positive advantages unaffected


def test_k3_kl():
    kl = k3_kl_BT(torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]]))
    assert float(kl) == pytest.approx(0.5 + math.log(2) - 1)  # exp(d) - d - 1 with d = log(1/2)
    assert float(k3_kl_BT(torch.tensor([[-1.0]]), torch.tensor([[-1.0]]))) == 0.0


def _inputs(logp_BT, old_BT, adv_B, mask_BT, weight_BT, ref=None):
    return LossInputs(logp_BT=logp_BT, old_logp_BT=old_BT, adv_B=adv_B, mask_BT=mask_BT, weight_BT=weight_BT,
                      is_weight_BT=torch.ones_like(logp_BT), entropy_BT=torch.zeros_like(logp_BT), ref_logp_BT=ref)


def test_grpo_loss_at_ratio_one_is_minus_weighted_advantage():
    alg = Grpo(clip_low=0.2, clip_high=0.2, dual_clip=None, loss_agg="seq_mean_token_mean", kl_coef=0.0,
               entropy_coef=0.0)
    mask_BT = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    weight_BT = torch.tensor([[0.25, 0.25], [0.5, 0.0]])
    logp_BT = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
    loss, stats = alg.loss(_inputs(logp_BT, logp_BT.detach(), torch.tensor([2.0, -1.0]), mask_BT, weight_BT))
    assert float(loss.detach()) == pytest.approx(-(0.25 * 2 + 0.25 * 2) + 0.5 * 1)
    loss.backward()
    # d loss / d logp = -A * ratio * weight at ratio 1
    assert torch.allclose(logp_BT.grad, torch.tensor([[-0.5, -0.5], [0.5, 0.0]]))
    assert float(stats["clip_frac"]) == 0.0


def test_kl_term_is_added_with_its_coefficient():
    alg = Grpo(0.2, 0.2, None, "token_mean", kl_coef=0.1, entropy_coef=0.0)
    logp_BT = torch.tensor([[math.log(0.5)]])
    ref_BT = torch.tensor([[math.log(0.25)]])
    loss, stats = alg.loss(_inputs(logp_BT, logp_BT, torch.tensor([0.0]), torch.ones(1, 1), torch.ones(1, 1), ref_BT))
    assert float(loss) == pytest.approx(0.1 * (0.5 + math.log(2) - 1))
    assert float(stats["kl_ref"]) == pytest.approx(0.5 + math.log(2) - 1)


def test_dapo_uses_its_configured_clip_range():
    alg = Dapo(0.2, 0.28, None, "token_mean", 0.0, 0.0)
    logp_BT = torch.tensor([[math.log(1.3)]])
    loss, stats = alg.loss(_inputs(logp_BT, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1),
                                   torch.ones(1, 1)))
    assert float(loss) == pytest.approx(-1.28)
    assert float(stats["clip_frac"]) == 1.0
