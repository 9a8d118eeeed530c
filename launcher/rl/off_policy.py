"""Off-policy correction: importance weights between the trainer's old policy and the
policy the engine sampled with (`algorithm.off_policy`), and the mismatch statistics.

The ratio of a token is w_t = exp(old_t - rollout_t) (old: the trainer's log-prob before
this step's update; rollout: the engine's, of the policy version that produced that token:
with in-flight updates a sequence's tokens may come from several versions, and each is
weighted by its own behaviour log-prob, inference.update_mode). The sequence ratio is their geometric mean over
the response, w_seq = exp(mean_t(old_t - rollout_t)). Each level is bounded by its mode
(OffPolicyMode): `truncate` clamps to [lower, upper] (TIS), `mask` keeps w inside the bounds
and zeroes it outside (IcePop), `reject` gives 1 inside and 0 outside (the geometric
sequence mask), `off` gives 1. A token's weight is its token weight times its sequence's.
The weights are computed without gradient: they re-weight the policy-gradient surrogate.

Shapes (grpo.py's legend): B sequences, T target positions; `mask_BT` marks response tokens.
"""
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Bounds:
    mode: str
    """off | truncate | mask | reject."""
    lower: float | None = None
    upper: float | None = None

    @classmethod
    def from_config(cls, level) -> "Bounds":
        return cls(getattr(level.mode, "value", level.mode), level.lower, level.upper)

    def apply(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight, outside the bounds) for ratios `w` (any shape)."""
        lower = 0.0 if self.lower is None else self.lower
        upper = float("inf") if self.upper is None else self.upper
        outside = (w < lower) | (w > upper)
        if self.mode == "off":
            return torch.ones_like(w), torch.zeros_like(outside)
        if self.mode == "truncate":
            return w.clamp(min=lower, max=upper), outside
        if self.mode == "mask":
            return torch.where(outside, torch.zeros_like(w), w), outside
        if self.mode == "reject":
            return (~outside).to(w.dtype), outside
        raise ValueError(f"off-policy mode {self.mode!r} is not one of off, truncate, mask, reject")

    @property
    def masks(self) -> bool:
        return self.mode in ("mask", "reject")


@dataclass(frozen=True)
class OffPolicy:
    token: Bounds = Bounds("truncate", None, 2.0)
    sequence: Bounds = Bounds("off")

    @classmethod
    def from_config(cls, off_policy) -> "OffPolicy":
        return cls(Bounds.from_config(off_policy.token), Bounds.from_config(off_policy.sequence))

    @torch.no_grad()
    def weights(self, old_BT: torch.Tensor, rollout_BT: torch.Tensor,
                mask_BT: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight_BT, masked_BT): each response token's importance weight (0 off the
        response) and whether a mask (token or its sequence's) dropped it."""
        mask_BT = mask_BT.bool()
        log_ratio_BT = torch.where(mask_BT, old_BT - rollout_BT, torch.zeros_like(old_BT))
        token_w_BT, token_out_BT = self.token.apply(torch.exp(log_ratio_BT))
        len_B = mask_BT.sum(dim=1).clamp(min=1)
        seq_w_B, seq_out_B = self.sequence.apply(torch.exp(log_ratio_BT.sum(dim=1) / len_B))
        masked_BT = torch.zeros_like(mask_BT)
        if self.token.masks:
            masked_BT |= token_out_BT
        if self.sequence.masks:
            masked_BT |= seq_out_B[:, None]
        weight_BT = token_w_BT * seq_w_B[:, None] * mask_BT
        return weight_BT, masked_BT & mask_BT



def mismatch_stats(old_BT: torch.Tensor, rollout_BT: torch.Tensor, mask_BT: torch.Tensor,
                   masked_BT: torch.Tensor) -> dict[str, torch.Tensor]:
    """Trainer-vs-rollout statistics of a micro-batch's response tokens, as sums over tokens
    (the driver divides by the step's tokens: logprob_abs_diff_mean, is_masked_frac, rollout_kl) and
    one max (the driver takes the max over micro-batches and ranks: logprob_abs_diff_max)."""
    mask_BT = mask_BT.bool()
    gap_BT = torch.where(mask_BT, (old_BT - rollout_BT).abs(), torch.zeros_like(old_BT))
    return {"logprob_abs_diff_mean": gap_BT.sum(), "logprob_abs_diff_max": gap_BT.amax() if gap_BT.numel() else gap_BT.sum(),
            "is_masked_frac": (masked_BT & mask_BT).sum().float(),
            "rollout_kl": torch.where(mask_BT, rollout_kl_BT(old_BT, rollout_BT), torch.zeros_like(old_BT)).sum()}


def rollout_kl_BT(old_BT: torch.Tensor, rollout_BT: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(rollout || trainer): w - 1 - log w with w = pi_old / pi_rollout.
    The engine sampled the tokens, so its policy is the side the expectation runs over; the
    arguments the other way round (1/w - 1 + log w) would estimate chi^2 - KL instead."""
    log_w_BT = old_BT - rollout_BT
    return torch.exp(log_w_BT) - 1.0 - log_w_BT
