"""From problems to scored groups: request chunks for the engines, rewards, advantages.

A chunk is a run of whole groups; its sampling seed is derived from (run seed, step,
round, chunk), so which engine serves it, and when, never changes the tokens.
"""
from dataclasses import dataclass

import torch

from launcher.contract.messages import Generation, GenerationRequest, SamplingParams
from launcher.rl.reward_fn import as_scorer
from launcher.rl.tasks import Problem


@dataclass
class Group:
    """All samples of one prompt. Per-sample lists are aligned."""

    problem: Problem
    prompt_ids: list[int]
    responses: list[list[int]]
    logprobs: list[list[float]]
    """Per response token, its behaviour log-prob: under the weights of its token version."""
    token_versions: list[list[int]]
    """Per response token, the policy version that produced it (Generation.token_versions)."""
    policy_version: int
    """The oldest token's version: what algorithm.max_staleness judges."""
    task_rewards: list[float]
    """The task's score of each response (what `reward` and the curves show)."""
    rewards: list[float]
    """After the algorithm's shaping (DAPO overlong penalty): what advantages use."""
    correct: list[bool]
    reward_errors: int = 0
    """Responses scored 0 because the reward raised, timed out or returned no finite number."""
    truncated: int = 0
    """Responses cut at max_response_len without an EOS id (what DAPO's overlong penalty targets)."""
    routes: list | None = None
    """Per sample, the engine's MoE routes (Generation.routes: uint16 numpy arrays), or None."""
    indexer_topk: list | None = None
    """Per sample, the engine's DSA indexer pools (Generation.indexer_topk: uint16 numpy arrays), or None."""
    loss_masks: list[list[bool]] | None = None
    """Multi-turn episodes (data.environment): per sample and response token, True for the model's own tokens,
    False for the environment's observations (kept in the sequence, out of the loss); None: all trained."""
    episode_stats: dict | None = None
    """Multi-turn episodes: the group's sums of turns, tool calls, tool errors and timeouts, model and
    observation tokens (driver/loop/episodes.py), for the step's row."""


def sampling_params(alg) -> SamplingParams:
    return SamplingParams(max_tokens=alg.max_response_len, temperature=alg.temperature, top_p=alg.top_p)


def chunk_seed(run_seed: int, step: int, round_index: int, chunk_index: int) -> int:
    return (run_seed * 1_000_003 + step * 10_007 + round_index * 101 + chunk_index) % (2**63)


def make_chunks(prompt_ids: list[list[int]], samples: int, groups_per_chunk: int, sampling: SamplingParams,
                seed_of, in_flight: bool = False) -> list[tuple[list[int], GenerationRequest]]:
    """(group indices, request) per chunk of `groups_per_chunk` consecutive groups;
    `in_flight`: weight updates may apply between their tokens (GenerationRequest.in_flight)."""
    chunks = []
    for c, start in enumerate(range(0, len(prompt_ids), groups_per_chunk)):
        members = list(range(start, min(start + groups_per_chunk, len(prompt_ids))))
        prompts = [prompt_ids[g] for g in members for _ in range(samples)]
        chunks.append((members, GenerationRequest(prompts=prompts, seed=seed_of(c), sampling=sampling,
                                                         in_flight=in_flight)))
    return chunks


def score_group(problem: Problem, prompt_ids: list[int], gen: Generation, rows: range, scorer, tokenizer,
                algorithm) -> Group:
    """`scorer`: the run's reward_fn.RewardScorer (Runtime.scorer); a bare Task is wrapped."""
    scorer = as_scorer(scorer)
    scored = [scorer.score(tokenizer.decode(gen.tokens[r]), problem) for r in rows]
    return make_group(problem, prompt_ids, gen, rows, [s.reward for s in scored], [s.correct for s in scored],
                      algorithm, reward_errors=sum(s.error is not None for s in scored))


def make_group(problem: Problem, prompt_ids: list[int], gen: Generation, rows: range, task_rewards: list[float],
               correct: list[bool], algorithm, reward_errors: int = 0, loss_masks: list | None = None) -> Group:
    """The Group of `gen`'s rows `rows`, scored `task_rewards` (shaped by the algorithm here)."""
    responses = [gen.tokens[r] for r in rows]
    lengths_B = torch.tensor([len(t) for t in responses])
    shaped_B = algorithm.shape_rewards(torch.tensor(task_rewards, dtype=torch.float32), lengths_B)
    return Group(problem=problem, prompt_ids=prompt_ids, responses=responses,
                 logprobs=[gen.logprobs[r] for r in rows], token_versions=[gen.token_versions[r] for r in rows],
                 policy_version=min(min(gen.token_versions[r]) for r in rows),
                 task_rewards=task_rewards, rewards=shaped_B.tolist(), correct=correct, reward_errors=reward_errors,
                 truncated=sum(not gen.finished[r] for r in rows),
                 routes=[gen.routes[r] for r in rows] if gen.routes is not None else None,
                 indexer_topk=[gen.indexer_topk[r] for r in rows] if gen.indexer_topk is not None else None,
                 loss_masks=loss_masks)


def split_generation(members: list[int], gen: Generation, samples: int) -> list[tuple[int, range]]:
    """(group index, rows of `gen`) for each group of a chunk."""
    return [(g, range(i * samples, (i + 1) * samples)) for i, g in enumerate(members)]
