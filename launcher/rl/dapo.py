"""DAPO: GRPO's loss with clip-higher and token-mean aggregation, plus dynamic sampling
(drop groups whose rewards are all equal) and the soft overlong penalty.

Shape legend (suffixes on tensor names):
    B  sequences      G  samples of one prompt (a group)      T  token positions
Clip-higher (clip_high > clip_low), token_mean and dual clip are config values that the
shared PPO loss in grpo.py applies; this file adds what only DAPO does.
"""
from dataclasses import dataclass

import torch

from launcher.rl.algorithm import ALGORITHMS
from launcher.rl.grpo import Grpo


def overlong_penalty_B(response_len_B: torch.Tensor, max_response_len: int, buffer_len: int,
                       penalty: float) -> torch.Tensor:
    """0 up to max_len - buffer, then linear down to -penalty at max_len (DAPO eq. 13)."""
    if buffer_len <= 0:
        return torch.zeros_like(response_len_B, dtype=torch.float32)
    start = max_response_len - buffer_len
    over_B = (response_len_B.float() - start).clamp(min=0.0)
    return -(over_B / buffer_len).clamp(max=1.0) * penalty


def has_signal(rewards_G: torch.Tensor) -> bool:
    """A group teaches something only if its task rewards differ. The loops pass the task's
    scores, before the overlong penalty (verl's DAPO filters on the score or accuracy too):
    in a group whose samples all failed alike, the penalty alone would make the advantages,
    and group normalisation makes any penalty, however small, a full-size push towards
    stopping at once (a random-init model then learns to answer nothing)."""
    return bool((rewards_G.max() - rewards_G.min()).abs() > 1e-9)


@dataclass
class Dapo(Grpo):
    dynamic_sampling: bool = False
    max_response_len: int = 0
    overlong_buffer_len: int = 0
    overlong_penalty: float = 0.0

    @classmethod
    def from_config(cls, alg) -> "Dapo":
        base = Grpo.from_config(alg)
        return cls(**vars(base), dynamic_sampling=alg.dynamic_sampling.enabled,
                   max_response_len=alg.max_response_len, overlong_buffer_len=alg.overlong.buffer_len,
                   overlong_penalty=alg.overlong.penalty)

    def shape_rewards(self, rewards_B: torch.Tensor, response_len_B: torch.Tensor) -> torch.Tensor:
        return rewards_B + overlong_penalty_B(response_len_B, self.max_response_len,
                                              self.overlong_buffer_len, self.overlong_penalty)

    def keep_group(self, rewards_G: torch.Tensor) -> bool:
        return has_signal(rewards_G) if self.dynamic_sampling else True


ALGORITHMS.register("dapo")(Dapo)
