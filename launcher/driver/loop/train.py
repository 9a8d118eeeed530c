"""One RL step's training phase, shared by both loops: advantages, mini-batches, shards.

Groups are cut into mini-batches of `algorithm.mini_batch_prompts` prompts (one optimizer
step each); each mini-batch's sequences are dealt round-robin over the data-parallel ranks.
The engine's per-sample arrays (CARRIED: MoE routes, DSA indexer pools) go with their samples.
With more than one mini-batch, the pre-update log-probs of every sequence are computed
first so that every mini-batch's PPO ratio is taken against the same old policy.
"""
import torch

from launcher.contract.messages import TrainShard
from launcher.driver.loop.rollout import Group

SUMMED_STATS = ("clip_frac", "ppo_kl", "entropy", "kl_ref", "is_weight", "rollout_kl", "logprob_abs_diff_mean",
                "is_masked_frac")
"""Sums over response tokens; the step's value is the sum over ranks and mini-batches / tokens."""
MAX_SUFFIX = "_max"
"""A trainer statistic named `*_max` is a maximum (trainer_base.py): the step's is the max
over ranks and mini-batches (logprob_abs_diff_max)."""
CARRIED = ("routes", "indexer_topk", "loss_masks")
"""Group and TrainShard fields holding one value per sample: the engine's arrays (routing /
indexer replay), multi-turn episodes' loss masks."""


def _flatten(groups: list[Group], algorithm, samples: int):
    rewards_B = torch.tensor([r for g in groups for r in g.rewards], dtype=torch.float32)
    adv_B = algorithm.advantages(rewards_B, samples)
    seqs, prompt_lens, rollout = [], [], []
    carried = {f: [] for f in CARRIED if groups and all(getattr(g, f) is not None for g in groups)}
    for g in groups:
        for response, logprobs in zip(g.responses, g.logprobs, strict=True):
            seqs.append(g.prompt_ids + response)
            prompt_lens.append(len(g.prompt_ids))
            rollout.append(logprobs)
        for f, arrays in carried.items():
            arrays += getattr(g, f)
    return seqs, prompt_lens, rollout, adv_B.tolist(), carried


def _shards(rows: list[int], dp: int, seqs, prompt_lens, adv, rollout, old, carried) -> list[TrainShard]:
    masks = carried.get("loss_masks")
    tokens = sum(sum(masks[r]) if masks else len(seqs[r]) - prompt_lens[r] for r in rows)
    shards = []
    for d in range(dp):
        mine = rows[d::dp]
        shards.append(TrainShard(
            sequences=[seqs[r] for r in mine], prompt_lens=[prompt_lens[r] for r in mine],
            advantages=[adv[r] for r in mine], tokens_in_mini_batch=tokens, seqs_in_mini_batch=len(rows),
            old_logprobs=[old[r] for r in mine] if old is not None else None,
            rollout_logprobs=[rollout[r] for r in mine],
            **{f: [arrays[r] for r in mine] for f, arrays in carried.items()},
        ))
    return shards


def trainer_logprobs(trainers, seqs: list[list[int]], prompt_lens: list[int], rollout: list[list[float]],
                     carried: dict) -> list[list[float]]:
    """The trainer's log-probs of each sequence's response tokens, no update (the rollout canary's
    scoring, driver/loop/canary.py); `carried`: the engine's routes / indexer pools to replay, if any."""
    everyone = list(range(len(seqs)))
    return trainers.logprobs(_shards(everyone, trainers.dp, seqs, prompt_lens, [0.0] * len(seqs), rollout, None,
                                     carried), order=everyone)


def train_on_groups(trainers, groups: list[Group], alg_cfg, algorithm) -> dict:
    """Run every mini-batch of a step through the trainer group; returns step metrics."""
    samples = alg_cfg.samples_per_prompt
    seqs, prompt_lens, rollout, adv, carried = _flatten(groups, algorithm, samples)
    per_mini = alg_cfg.mini_batch_prompts * samples
    minis = [list(range(s, min(s + per_mini, len(seqs)))) for s in range(0, len(seqs), per_mini)]
    old = None
    if len(minis) > 1:
        everyone = list(range(len(seqs)))
        old = trainers.logprobs(_shards(everyone, trainers.dp, seqs, prompt_lens, adv, rollout, None, carried),
                                order=everyone)
    totals: dict[str, float] = {}
    for rows in minis:
        per_rank = trainers.train_step(_shards(rows, trainers.dp, seqs, prompt_lens, adv, rollout, old, carried))
        for stats in per_rank:
            for key, value in stats.items():
                if key.endswith(MAX_SUFFIX):
                    totals[key] = max(totals.get(key, value), value)
                elif key != "grad_norm":
                    totals[key] = totals.get(key, 0.0) + value
        totals["grad_norm"] = per_rank[0]["grad_norm"]
    tokens = max(totals.get("tokens", 0.0), 1.0)
    metrics = {key: totals[key] / tokens for key in SUMMED_STATS if key in totals}
    metrics.update({key: value for key, value in totals.items() if key.endswith(MAX_SUFFIX)})
    if totals.get("route_pairs"):  # the engines returned routes (routing_replay / routing_agreement)
        metrics.update(routing_agreement=totals["route_agree"] / totals["route_pairs"],
                       routing_agreement_own=totals["route_agree_own"] / totals["route_pairs"])
    if totals.get("indexer_pairs"):  # the engines returned indexer pools (indexer_replay / indexer_agreement)
        metrics.update(indexer_agreement=totals["indexer_agree"] / totals["indexer_pairs"],
                       indexer_agreement_own=totals["indexer_agree_own"] / totals["indexer_pairs"])
    metrics.update(loss=totals.get("loss", 0.0) / len(minis), grad_norm=totals.get("grad_norm", 0.0),
                   mini_batches=len(minis), trained_sequences=len(seqs))
    return metrics
