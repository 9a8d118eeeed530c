"""The algorithm interface the loops and trainer backends use, and its registry.

An algorithm shapes rewards, decides which groups are trained on, turns rewards into
advantages and defines the per-token loss. Backends call `loss` without knowing which
algorithm it is; loops look one up by `algorithm.name`.
"""
import importlib
from dataclasses import dataclass
from typing import Protocol

import torch

from launcher.registry import Registry


@dataclass
class LossInputs:
    """Per-token tensors of one micro-batch, aligned to target tokens (see grpo.py legend)."""

    logp_BT: torch.Tensor
    old_logp_BT: torch.Tensor
    adv_B: torch.Tensor
    mask_BT: torch.Tensor
    weight_BT: torch.Tensor
    is_weight_BT: torch.Tensor
    entropy_BT: torch.Tensor
    ref_logp_BT: torch.Tensor | None = None


class Algorithm(Protocol):
    kl_coef: float

    def shape_rewards(self, rewards_B: torch.Tensor, response_len_B: torch.Tensor) -> torch.Tensor: ...

    def keep_group(self, rewards_G: torch.Tensor) -> bool: ...

    def advantages(self, rewards_B: torch.Tensor, group_size: int) -> torch.Tensor: ...

    def loss(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


def _discover(name: str | None) -> None:
    for module in ("launcher.rl.grpo", "launcher.rl.dapo"):
        importlib.import_module(module)


ALGORITHMS: Registry = Registry("algorithm", _discover)


def make_algorithm(alg_config) -> Algorithm:
    """The algorithm named by `algorithm.name`, configured from the `algorithm` section."""
    name = getattr(alg_config.name, "value", alg_config.name)
    return ALGORITHMS.get(name).from_config(alg_config)
