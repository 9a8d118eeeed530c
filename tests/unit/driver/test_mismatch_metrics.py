"""The trainer-vs-rollout metrics of every training row: what a micro-batch sums, how the
driver turns ranks' and mini-batches' sums into the step's means and maxima, and the plot's
mismatch panel."""
import json

import numpy as np
import pytest
import torch

from launcher.driver.loop.rollout import Group
from launcher.driver.loop.train import train_on_groups
from launcher.driver.records.plot import MISMATCH_SERIES, panel, write_curves
from launcher.rl.off_policy import OffPolicy, mismatch_stats, rollout_kl_BT
from launcher.rl.tasks import Problem


def test_micro_batch_statistics():
    old_BT = torch.tensor([[0.0, -1.0, -5.0], [-0.5, -0.5, 0.0]])
    rollout_BT = torch.tensor([[-0.2, -1.0, 0.0], [-0.4, -0.8, 0.0]])
    mask_BT = torch.tensor([[True, True, False], [True, True, False]])
    _, masked_BT = OffPolicy().weights(old_BT, rollout_BT, mask_BT)
    stats = mismatch_stats(old_BT, rollout_BT, mask_BT, torch.tensor([[True, False, True], [False] * 3]))
    assert float(stats["logprob_abs_diff_mean"]) == pytest.approx(0.2 + 0.0 + 0.1 + 0.3)  # padding's 5.0 left out
    assert float(stats["logprob_abs_diff_max"]) == pytest.approx(0.3)
    assert float(stats["is_masked_frac"]) == 1.0 and not masked_BT.any()


class _Trainers:
    """Two data-parallel ranks whose train_step returns fixed sums (what TrainerBase.train_step returns)."""

    dp = 2

    def __init__(self):
        self.calls = 0

    def train_step(self, shards):
        self.calls += 1
        return [{"loss": 1.0, "tokens": 4.0, "logprob_abs_diff_mean": 0.4, "logprob_abs_diff_max": 0.1 * self.calls,
                 "is_masked_frac": 1.0, "rollout_kl": 0.02, "grad_norm": 1.0},
                {"loss": 1.0, "tokens": 4.0, "logprob_abs_diff_mean": 0.8, "logprob_abs_diff_max": 0.05,
                 "is_masked_frac": 0.0, "rollout_kl": 0.02, "grad_norm": 1.0}]

    def logprobs(self, shards, order):
        return [[0.0] * 2 for _ in order]


def _groups(n):
    return [Group(Problem("p", "a"), [1, 2], [[3, 4]] * 2, [[-1.0, -1.0]] * 2, [[0, 0]] * 2, 0, [0.0, 1.0],
                  [0.0, 1.0], [False, True]) for _ in range(n)]


def test_step_means_over_tokens_and_max_over_ranks_and_mini_batches():
    class Alg:
        samples_per_prompt, mini_batch_prompts = 2, 2

    class Algorithm:
        @staticmethod
        def advantages(rewards_B, samples):
            return rewards_B

    trainers = _Trainers()
    metrics = train_on_groups(trainers, _groups(4), Alg, Algorithm)  # two mini-batches of two groups
    assert trainers.calls == 2 and metrics["mini_batches"] == 2
    assert metrics["logprob_abs_diff_mean"] == pytest.approx((0.4 + 0.8) * 2 / 16)
    assert metrics["logprob_abs_diff_max"] == pytest.approx(0.2)  # the second mini-batch's rank 0
    assert metrics["is_masked_frac"] == pytest.approx(2 / 16) and metrics["rollout_kl"] == pytest.approx(0.08 / 16)


def test_plot_draws_the_mismatch_panel(tmp_path):
    rows = [{"step": s, "reward": 0.1 * s, "accuracy": 0.0, "response_len": 3.0, "logprob_abs_diff_mean": 0.01 * s,
             "rollout_kl": 0.001, "is_masked_frac": 0.0} for s in (1, 2, 3)]
    assert [key for key, *_ in panel(rows, MISMATCH_SERIES)] == ["logprob_abs_diff_mean", "rollout_kl", "is_masked_frac"]
    assert panel([{"step": 1, "reward": 0.0}], MISMATCH_SERIES) == []
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert write_curves(metrics, tmp_path / "curves.png").stat().st_size > 0


def test_indexer_pools_go_with_their_samples_and_agreement_is_summed_over_ranks():
    """Each group's per-sample pool arrays reach the shard of the rank that trains the sample;
    indexer_agreement is the ranks' agreeing pairs over their pairs."""
    class Alg:
        samples_per_prompt, mini_batch_prompts = 2, 2

    class Algorithm:
        @staticmethod
        def advantages(rewards_B, samples):
            return rewards_B

    class Counting(_Trainers):
        shards = None

        def train_step(self, shards):
            self.shards = shards
            return [stats | {"indexer_pairs": 6.0, "indexer_agree": a, "indexer_agree_own": 3.0}
                    for stats, a in zip(super().train_step(shards), (6.0, 5.0), strict=True)]

    groups = _groups(2)
    for g, group in enumerate(groups):
        group.indexer_topk = [np.full((3, 1, 4), 10 * g + s, dtype=np.uint16) for s in range(2)]
    trainers = Counting()
    metrics = train_on_groups(trainers, groups, Alg, Algorithm)
    assert [[int(a[0, 0, 0]) for a in shard.indexer_topk] for shard in trainers.shards] == [[0, 10], [1, 11]]
    assert trainers.shards[0].routes is None  # the groups carry no routes
    assert metrics["indexer_agreement"] == pytest.approx(11 / 12) and metrics["indexer_agreement_own"] == 0.5


def test_plot_draws_the_indexer_agreement():
    rows = [{"step": s, "reward": 0.0, "indexer_agreement": 1.0} for s in (1, 2)]
    assert panel(rows, MISMATCH_SERIES) == [("indexer_agreement", [1, 2], [1.0, 1.0])]


def test_rollout_kl_estimates_kl_of_the_sampling_engine_against_the_trainer():
    """Tokens come from the engine, so E_rollout[w - 1 - log w] (w = pi_old / pi_rollout) is
    KL(rollout || trainer) exactly; the issue's worked cases (one token, and the 2-token distributions)."""
    one = rollout_kl_BT(torch.tensor([[np.log(0.5)]]), torch.tensor([[np.log(0.25)]]))
    assert float(one) == pytest.approx(1 - np.log(2), abs=1e-6)  # 0.3069, not 0.1931
    rng = np.random.default_rng(0)
    for rollout_p, trainer_p in [((0.5, 0.5), (0.9, 0.1)), *[(rng.dirichlet([1] * 5), rng.dirichlet([1] * 5)) for _ in range(4)]]:
        rollout_p, trainer_p = np.asarray(rollout_p), np.asarray(trainer_p)
        per_token = rollout_kl_BT(torch.tensor(np.log(trainer_p))[None], torch.tensor(np.log(rollout_p))[None])[0]
        expectation = float((torch.tensor(rollout_p) * per_token).sum())
        assert expectation == pytest.approx(float(np.sum(rollout_p * np.log(rollout_p / trainer_p))), rel=1e-9)


def test_mismatch_stats_sum_rollout_kl_over_response_tokens_only():
    old_BT = torch.tensor([[np.log(0.5), -5.0]])
    rollout_BT = torch.tensor([[np.log(0.25), 0.0]])
    stats = mismatch_stats(old_BT, rollout_BT, torch.tensor([[True, False]]), torch.zeros(1, 2, dtype=torch.bool))
    assert float(stats["rollout_kl"]) == pytest.approx(1 - np.log(2), abs=1e-6)  # the padding's gap of 5 left out
