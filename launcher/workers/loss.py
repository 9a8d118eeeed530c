"""One micro-batch's RL loss from the trainer's log-probs: shared by every trainer backend.

Backends differ only in how they run the model (HF module or Megatron runner); the loss
inputs (old/rollout log-probs on the token grid, the off-policy importance weights, advantages,
aggregation weights, optional reference log-probs) are assembled here once, so the hf and
megatron backends cannot drift apart numerically.

Shapes: B sequences of the micro-batch, T response tokens (the grid of `grid`).
"""
from collections.abc import Callable

import torch

from launcher.contract.messages import TrainShard
from launcher.rl.algorithm import LossInputs
from launcher.rl.grpo import token_weights
from launcher.rl.off_policy import mismatch_stats
from launcher.workers.batch import grid


def micro_loss(algorithm, shard: TrainShard, batch, logp_BT: torch.Tensor, entropy_BT: torch.Tensor,
               ref_logprobs: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(loss, summed statistics); `ref_logprobs` runs only when the KL term is on."""
    dev = logp_BT.device
    if not algorithm.entropy_coef:
        entropy_BT = entropy_BT.detach()
    old_BT = grid(shard.old_logprobs, batch, shard.prompt_lens).to(dev) if shard.old_logprobs else logp_BT.detach()
    mask_BT = batch.mask_BT.to(dev)
    is_weight_BT = torch.ones_like(logp_BT)
    rollout_BT = None
    if shard.rollout_logprobs is not None:
        rollout_BT = grid(shard.rollout_logprobs, batch, shard.prompt_lens).to(dev)
        is_weight_BT, masked_BT = algorithm.off_policy.weights(old_BT, rollout_BT, mask_BT)
    inputs = LossInputs(
        logp_BT=logp_BT, old_logp_BT=old_BT,
        adv_B=torch.tensor([shard.advantages[r] for r in batch.rows], device=dev),
        mask_BT=mask_BT, entropy_BT=entropy_BT, is_weight_BT=is_weight_BT * mask_BT,
        weight_BT=token_weights(mask_BT, algorithm.loss_agg, shard.tokens_in_mini_batch, shard.seqs_in_mini_batch),
        ref_logp_BT=ref_logprobs() if algorithm.kl_coef > 0 else None,
    )
    loss, stats = algorithm.loss(inputs)
    stats["is_weight"] = (is_weight_BT * mask_BT).sum().detach()
    if rollout_BT is not None:
        stats.update(mismatch_stats(old_BT.detach(), rollout_BT, mask_BT, masked_BT))
    return loss, stats
