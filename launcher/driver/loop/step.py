"""The pieces of one RL step that both loops run the same way: prompts out to the engines,
finished chunks back as scored groups, DAPO's keep test, the timed train call, and the
step's metrics row.

What differs stays in the loops: loop_sync.py generates, then trains, in lockstep (and
regenerates for DAPO's shortfall); loop_async.py overlaps the two through a bounded queue.
"""
import time
from dataclasses import dataclass

import torch

from launcher.contract.messages import GenerationRequest
from launcher.driver.loop.episodes import EPISODE_STATS, EpisodeSet
from launcher.driver.loop.rollout import Group, make_chunks, make_group, sampling_params, score_group, split_generation
from launcher.driver.loop.runtime import Runtime
from launcher.driver.loop.train import train_on_groups
from launcher.driver.records.samples_log import write_samples
from launcher.rl.degeneration import degeneration_stats
from launcher.rl.tasks import Problem


@dataclass
class Chunk:
    """What the driver keeps of a chunk it sent: the problems and token ids it was cut
    from (a whole round's in the sync loop, the chunk's own in the async one) and which
    of them (`members`) it holds, in the order of its generations; with data.environment, its
    episodes and the request they continue from (each turn goes back to the engines)."""

    problems: list[Problem]
    prompt_ids: list[list[int]]
    members: list[int]
    episodes: EpisodeSet | None = None
    request: GenerationRequest | None = None


def send_prompts(rt: Runtime, n_prompts: int, groups_per_chunk: int, seed_of, first_chunk: int = 0) -> dict:
    """Take the stream's next n_prompts problems (advancing state.data_position, the resume
    point), cut them into chunks of groups_per_chunk groups and send each to an engine;
    `seed_of(c)` is chunk c's sampling seed. Returns {ObjectRef: Chunk}."""
    problems = rt.stream.take(rt.state.data_position, n_prompts)
    rt.state.data_position += n_prompts
    prompt_ids = [rt.tokenizer.encode(p.prompt) for p in problems]
    samples = rt.config.algorithm.samples_per_prompt
    chunks = make_chunks(prompt_ids, samples, groups_per_chunk, sampling_params(rt.config.algorithm), seed_of,
                         in_flight=rt.plan.loop.in_flight_updates)
    pending = {}
    for c, (members, request) in enumerate(chunks):
        chunk = Chunk(problems, prompt_ids, members, request=request)
        if rt.episodes is not None:
            chunk.episodes = rt.episodes.start(problems, prompt_ids, members, samples)
            request = chunk.episodes.request(request.sampling, request.seed, request.in_flight)
        pending[rt.engines.submit(request, first_chunk + c)] = chunk
    return pending


def collect_scored(rt: Runtime, pending: dict, timeout_s: float | None = None) -> list[tuple[int, Group]]:
    """Pop the chunks of `pending` (from send_prompts) that are done and score them:
    (index into the chunk's problems, Group) per group. Without timeout_s this waits for
    one chunk; with it, it takes whatever finished within timeout_s (maybe nothing)."""
    samples, scored = rt.config.algorithm.samples_per_prompt, []
    for ref in rt.engines.wait_done(list(pending), timeout_s=timeout_s):
        chunk, gen = pending.pop(ref), rt.engines.result(ref)
        if chunk.episodes is not None:
            if not chunk.episodes.take_turn(gen):  # live episodes: their next turn, to the same engine pool
                request = chunk.episodes.request(chunk.request.sampling, chunk.request.seed, chunk.request.in_flight)
                pending[rt.engines.submit(request, chunk.members[0])] = chunk
                continue
            scored += episode_groups(chunk, samples, rt.algorithm)
            continue
        for g, rows in split_generation(chunk.members, gen, samples):
            scored.append((g, score_group(chunk.problems[g], chunk.prompt_ids[g], gen, rows, rt.scorer,
                                          rt.tokenizer, rt.algorithm)))
    return scored


def episode_groups(chunk: Chunk, samples: int, algorithm) -> list[tuple[int, Group]]:
    """A chunk whose episodes all ended, as scored groups (the env's rewards, observation tokens masked)."""
    gen, rewards, correct, masks, stats = chunk.episodes.generation()
    out = []
    for g, rows in split_generation(chunk.members, gen, samples):
        group = make_group(chunk.problems[g], chunk.prompt_ids[g], gen, rows, [rewards[r] for r in rows],
                           [correct[r] for r in rows], algorithm, loss_masks=[masks[r] for r in rows])
        group.episode_stats = {k: sum(stats[r][k] for r in rows) for k in EPISODE_STATS}
        out.append((g, group))
    return out


def keep_on_task_rewards(keep_group, group: Group) -> bool:
    """DAPO dynamic sampling's test (`algorithm.keep_group`), taken on the task's rewards:
    on the shaped ones the overlong penalty alone would keep an all-wrong group whose
    responses differ in length, and training on it teaches "stop at once"."""
    return keep_group(torch.tensor(group.task_rewards))


def timed_train(rt: Runtime, groups: list[Group]) -> tuple[dict, float]:
    """train.train_on_groups on the step's groups: (train metrics, seconds it took); with
    logging.samples they are first written to samples.jsonl (samples_log.py)."""
    if rt.config.logging.samples:
        write_samples(rt.run_dir, rt.state.step + 1, rt.state.policy_version, groups)
    started = time.monotonic()
    metrics = train_on_groups(rt.trainers, groups, rt.config.algorithm, rt.algorithm)
    return metrics, time.monotonic() - started


def step_metrics(rt: Runtime, gen: dict, train: dict, *, train_s: float, sync_s: float, step_s: float,
                 other_s: float, **loop_own) -> dict:
    """The row of step `state.step` (metrics.py says what `kl` is): the generation summary
    `gen`, the train metrics (none when DAPO kept no group), the timings and whatever is
    the loop's own (`loop_own`: rollout_s, staleness, queue and drop counts)."""
    kl = train.get("kl_ref", train.get("rollout_kl", 0.0))
    return {"step": rt.state.step, **gen, **train, **loop_own, "kl": kl, "train_s": train_s, "sync_s": sync_s,
            "step_s": step_s, "other_s": other_s, "tokens_per_s": gen["generated_tokens"] / max(step_s, 1e-9),
            "policy_version": rt.state.policy_version, "data_position": rt.state.data_position}


SAMPLE_MEANS = ("reward", "accuracy", "response_len", "truncated_frac", "overlong_penalized_frac",
                "overlong_penalty_mean", "repeat_ngram_frac", "collapse_frac")
"""The keys of a step's row that are means over its generated samples: None (null in
metrics.jsonl) when it generated none, as an async step training on groups queued before
it may (0 there would read as a policy that scores nothing)."""


def generation_summary(groups_seen: list[Group], seconds: float) -> dict:
    """Reward, accuracy, length and the degeneration signs (rl/degeneration.py) over every sample
    generated (dropped groups included); the SAMPLE_MEANS are None without a sample, the counts 0."""
    rewards = [r for g in groups_seen for r in g.task_rewards]
    correct = [c for g in groups_seen for c in g.correct]
    lengths = [len(t) for g in groups_seen for t in g.responses]
    shaping = [s - r for g in groups_seen for s, r in zip(g.rewards, g.task_rewards, strict=True)]
    degenerate = degeneration_stats([t for g in groups_seen for t in g.responses],
                                    [lp for g in groups_seen for lp in g.logprobs])
    counts = {"generated_tokens": sum(lengths), "groups_generated": len(groups_seen), "gen_s": seconds,
              "reward_errors": sum(g.reward_errors for g in groups_seen),
              "nonfinite_logprobs": degenerate.pop("nonfinite_logprobs")}
    counts.update(episode_summary(groups_seen))
    if not rewards:
        return {**dict.fromkeys(SAMPLE_MEANS), **counts}
    n = len(rewards)
    means = {"reward": sum(rewards) / n, "accuracy": sum(correct) / n, "response_len": sum(lengths) / n,
             "truncated_frac": sum(g.truncated for g in groups_seen) / n,
             "overlong_penalized_frac": sum(d < 0 for d in shaping) / n, "overlong_penalty_mean": sum(shaping) / n}
    return {**means, **degenerate, **counts}


def episode_summary(groups_seen: list[Group]) -> dict:
    """Multi-turn episodes' counts over the step's groups: turns per episode, tool calls with the
    share that failed or timed out (an env step that raised or timed out counts as both a call and
    a failure), model and observation tokens. Empty without data.environment."""
    stats = [g.episode_stats for g in groups_seen if g.episode_stats is not None]
    if not stats:
        return {}
    total = {k: sum(s[k] for s in stats) for k in EPISODE_STATS}
    episodes = sum(len(g.responses) for g in groups_seen if g.episode_stats is not None)
    calls = total["tool_calls"] + total["step_errors"] + total["step_timeouts"]
    return {"turns_mean": total["turns"] / episodes, "tool_calls": calls,
            "tool_error_frac": (total["tool_errors"] + total["step_errors"]) / calls if calls else None,
            "tool_timeout_frac": (total["tool_timeouts"] + total["step_timeouts"]) / calls if calls else None,
            "model_tokens": total["model_tokens"], "observation_tokens": total["observation_tokens"]}
