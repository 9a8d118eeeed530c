"""algorithm.off_policy: token and sequence importance weights (truncate, mask, reject),
the default reproducing the former token TIS, and the weights reaching the hf trainer's loss."""
import math

import pytest
import torch

from launcher.contract.messages import GenerationRequest, SamplingParams, TrainShard
from launcher.contract.spec import ActorSpec
from launcher.rl.algorithm import make_algorithm
from launcher.rl.off_policy import Bounds, OffPolicy
from launcher.weight_sync.pump import sync_in_process
from launcher.workers import engine_class, trainer_class
from tests.shared_compose import compose_shipped

OLD_BT = torch.tensor([[0.0, -1.0, -2.0, 0.0], [-0.5, -0.5, 0.0, 0.0]])
ROLLOUT_BT = torch.tensor([[-1.0, -1.0, -1.0, 0.0], [-0.5, -0.6, 0.0, 0.0]])
MASK_BT = torch.tensor([[True, True, True, False], [True, True, False, False]])


def test_default_is_the_former_token_tis():
    """Every recipe kept the token TIS it had (cap 2.0, the former grpo.IS_WEIGHT_CAP)."""
    algorithm = make_algorithm(compose_shipped(["recipe=tiny_grpo"]).config.algorithm)
    assert algorithm.off_policy == OffPolicy(Bounds("truncate", None, 2.0), Bounds("off"))
    weight_BT, masked_BT = OffPolicy().weights(OLD_BT, ROLLOUT_BT, MASK_BT)
    expected_BT = torch.exp(OLD_BT - ROLLOUT_BT).clamp(max=2.0) * MASK_BT
    assert torch.allclose(weight_BT, expected_BT) and not masked_BT.any()


@pytest.mark.parametrize("mode, inside, outside", [("truncate", 1.5, 3.0), ("mask", 1.5, 0.0), ("reject", 1.0, 0.0),
                                                   ("off", 1.0, 1.0)])
def test_bound_modes(mode, inside, outside):
    w = torch.tensor([1.5, 4.0])
    weight, out = Bounds(mode, 0.5, 3.0).apply(w)
    assert weight.tolist() == [inside, outside]
    assert out.tolist() == ([False, False] if mode == "off" else [False, True])


def test_sequence_weight_is_the_geometric_mean_of_the_response_ratios():
    policy = OffPolicy(Bounds("off"), Bounds("truncate", None, 10.0))
    weight_BT, _ = policy.weights(OLD_BT, ROLLOUT_BT, MASK_BT)
    seq0 = math.exp((1.0 + 0.0 - 1.0) / 3)  # padding (column 3) is not part of the mean
    seq1 = math.exp((0.0 + 0.1) / 2)
    assert torch.allclose(weight_BT, torch.tensor([[seq0] * 3 + [0.0], [seq1] * 2 + [0.0, 0.0]]))


def test_masks_drop_tokens_and_whole_sequences():
    token_mask = OffPolicy(Bounds("mask", 0.5, 2.0), Bounds("off"))
    weight_BT, masked_BT = token_mask.weights(OLD_BT, ROLLOUT_BT, MASK_BT)
    # row 0: ratios e, 1, 1/e -> e and 1/e fall outside [0.5, 2]
    assert masked_BT.tolist() == [[True, False, True, False], [False, False, False, False]]
    assert weight_BT[0].tolist() == [0.0, 1.0, 0.0, 0.0]
    geometric = OffPolicy(Bounds("truncate", None, 2.0), Bounds("reject", 0.99, 1.01))
    weight_BT, masked_BT = geometric.weights(OLD_BT, ROLLOUT_BT, MASK_BT)
    # row 0's geometric mean is exactly 1 (kept, token TIS applies); row 1's is e^0.05 (dropped)
    assert masked_BT.tolist() == [[False] * 4, [True, True, False, False]]
    assert torch.allclose(weight_BT[0], torch.tensor([2.0, 1.0, math.exp(-1.0), 0.0])) and not weight_BT[1].any()


def test_config_block_reaches_the_algorithm():
    cfg = compose_shipped(["recipe=tiny_dapo_async", "algorithm.off_policy.token.mode=mask",
                           "algorithm.off_policy.token.lower=0.5", "algorithm.off_policy.token.upper=5",
                           "algorithm.off_policy.sequence.mode=reject", "algorithm.off_policy.sequence.lower=0.999",
                           "algorithm.off_policy.sequence.upper=1.001"]).config
    assert make_algorithm(cfg.algorithm).off_policy == OffPolicy(Bounds("mask", 0.5, 5.0), Bounds("reject", 0.999, 1.001))


def _trainer_and_shard(*overrides):
    cfg = compose_shipped(["recipe=tiny_grpo", "algorithm.max_response_len=4", *overrides]).config
    trainer, engine = trainer_class("hf")(ActorSpec.planned(cfg, 0, 1)), engine_class("hf")(ActorSpec.planned(cfg, 0))
    sync_in_process(trainer, [engine], 0, with_base=True)
    prompts = [[5, 6, 7]] * 4
    gen = engine.generate(GenerationRequest(prompts, 1, SamplingParams(max_tokens=4)))
    seqs = [p + t for p, t in zip(prompts, gen.tokens, strict=True)]
    # the engine's log-probs shifted: a sampler that was 0.1 nats surer of every token
    rollout = [[lp + 0.1 for lp in row] for row in gen.logprobs]
    shard = TrainShard(seqs, [3] * 4, [1.0, -1.0, 0.5, -0.5], sum(len(t) for t in gen.tokens), 4,
                       rollout_logprobs=rollout)
    return trainer, shard


@pytest.mark.slow
def test_trainer_step_weights_and_drops_by_the_config():
    """The weights reach the hf trainer's loss (both loops train through train_on_groups ->
    train_step -> workers/loss.py): a geometric sequence mask tighter than the 0.1-nat gap
    drops every sequence (no gradient); the default token TIS weights every token e^-0.1."""
    trainer, shard = _trainer_and_shard()
    stats = trainer.train_step(shard)
    assert stats["is_weight"] / stats["tokens"] == pytest.approx(math.exp(-0.1), rel=1e-4)
    # the metrics of every step (part of the row the loops log): the 0.1-nat gap, nothing masked
    assert stats["logprob_abs_diff_mean"] / stats["tokens"] == pytest.approx(0.1, abs=1e-5)
    assert stats["logprob_abs_diff_max"] == pytest.approx(0.1, abs=1e-5) and stats["is_masked_frac"] == 0.0
    trainer, shard = _trainer_and_shard("algorithm.off_policy.sequence.mode=reject",
                                        "algorithm.off_policy.sequence.lower=0.99",
                                        "algorithm.off_policy.sequence.upper=1.01")
    stats = trainer.train_step(shard)
    assert stats["is_weight"] == 0.0 and stats["loss"] == 0.0 and stats["grad_norm"] == 0.0
    assert stats["is_masked_frac"] == stats["tokens"]
