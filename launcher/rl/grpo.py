"""GRPO: group-normalised advantages and the PPO clipped policy loss (optional k3 KL).

Shape legend (suffixes on tensor names):
    B  sequences in the (micro-)batch      G  samples per prompt (one group)
    T  token positions (targets: the token predicted at each position)
Per-token tensors are aligned to targets; `mask_BT` is 1 on response tokens.

The loss returns a *sum* over tokens already weighted by `weight_BT`, which carries the
aggregation (token mean, sequence mean) with the normaliser of the whole mini-batch
across data-parallel ranks, so summing gradients over ranks and micro-batches gives
exactly the single-process loss.
"""
from dataclasses import dataclass, field

import torch

from launcher.rl.algorithm import ALGORITHMS, LossInputs
from launcher.rl.off_policy import OffPolicy

ADV_EPS = 1e-6


def group_advantages(rewards_B: torch.Tensor, group_size: int) -> torch.Tensor:
    """(r - mean of its group) / (std of its group + eps); groups are consecutive runs of G.

    std is the unbiased one (as in verl's GRPO); a group with equal rewards gets zeros.
    """
    rewards_NG = rewards_B.view(-1, group_size)
    mean_N1 = rewards_NG.mean(dim=1, keepdim=True)
    std_N1 = rewards_NG.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean_N1)
    return ((rewards_NG - mean_N1) / (std_N1 + ADV_EPS)).reshape(-1)


def token_weights(mask_BT: torch.Tensor, loss_agg: str, tokens_in_mini_batch: int,
                  seqs_in_mini_batch: int) -> torch.Tensor:
    """Per-token weights so that sum(weight * loss) is the mini-batch's aggregated loss."""
    mask_BT = mask_BT.float()
    if loss_agg == "token_mean":
        return mask_BT / max(tokens_in_mini_batch, 1)
    if loss_agg == "seq_mean_token_mean":
        len_B1 = mask_BT.sum(dim=1, keepdim=True).clamp(min=1)
        return mask_BT / len_B1 / max(seqs_in_mini_batch, 1)
    if loss_agg == "seq_mean_token_sum":
        return mask_BT / max(seqs_in_mini_batch, 1)
    raise ValueError(f"algorithm.loss_agg={loss_agg!r} is not one of token_mean, seq_mean_token_mean, seq_mean_token_sum")


def clipped_pg_BT(logp_BT, old_logp_BT, adv_BT, clip_low: float, clip_high: float,
                  dual_clip: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate per token (a loss: lower is better) and whether it clipped."""
    ratio_BT = torch.exp(logp_BT - old_logp_BT)
    unclipped_BT = -adv_BT * ratio_BT
    clipped_BT = -adv_BT * ratio_BT.clamp(1.0 - clip_low, 1.0 + clip_high)
    pg_BT = torch.maximum(unclipped_BT, clipped_BT)
    if dual_clip is not None:
        pg_BT = torch.where(adv_BT < 0, torch.minimum(pg_BT, -adv_BT * dual_clip), pg_BT)
    return pg_BT, (clipped_BT > unclipped_BT).float()


def k3_kl_BT(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 >= 0."""
    diff_BT = ref_logp_BT - logp_BT
    return torch.exp(diff_BT) - diff_BT - 1.0


@dataclass
class Grpo:
    """Symmetric (or configured) clip, sequence-mean loss by default, no reward shaping."""

    clip_low: float
    clip_high: float
    dual_clip: float | None
    loss_agg: str
    kl_coef: float
    entropy_coef: float
    off_policy: OffPolicy = field(default_factory=OffPolicy)
    """Importance weights pi_old / pi_rollout (algorithm.off_policy; off_policy.py)."""

    @classmethod
    def from_config(cls, alg) -> "Grpo":
        return cls(clip_low=alg.clip_low, clip_high=alg.clip_high, dual_clip=alg.dual_clip,
                   loss_agg=_value(alg.loss_agg), kl_coef=alg.kl_coef, entropy_coef=alg.entropy_coef,
                   off_policy=OffPolicy.from_config(alg.off_policy))

    def shape_rewards(self, rewards_B: torch.Tensor, response_len_B: torch.Tensor) -> torch.Tensor:
        return rewards_B

    def keep_group(self, rewards_G: torch.Tensor) -> bool:
        return True

    def advantages(self, rewards_B: torch.Tensor, group_size: int) -> torch.Tensor:
        return group_advantages(rewards_B, group_size)

    def loss(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Weighted token-sum of the policy loss (+ KL, - entropy) and summed statistics."""
        adv_BT = x.adv_B[:, None].expand_as(x.logp_BT)
        pg_BT, clipped_BT = clipped_pg_BT(x.logp_BT, x.old_logp_BT, adv_BT,
                                          self.clip_low, self.clip_high, self.dual_clip)
        loss_BT = pg_BT * x.is_weight_BT
        stats = {"clip_frac": clipped_BT, "ppo_kl": x.old_logp_BT - x.logp_BT, "entropy": x.entropy_BT}
        if x.ref_logp_BT is not None:
            kl_BT = k3_kl_BT(x.logp_BT, x.ref_logp_BT)
            loss_BT = loss_BT + self.kl_coef * kl_BT
            stats["kl_ref"] = kl_BT
        if self.entropy_coef:
            loss_BT = loss_BT - self.entropy_coef * x.entropy_BT
        loss = (loss_BT * x.weight_BT).sum()
        mask_BT = x.mask_BT.float()
        return loss, {k: (v.detach() * mask_BT).sum() for k, v in stats.items()}


def _value(choice) -> str:
    return getattr(choice, "value", choice)


ALGORITHMS.register("grpo")(Grpo)
