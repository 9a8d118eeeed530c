"""The synchronous colocated loop: engines and trainer ranks take turns on the same GPUs.

Per step: offload trainer -> wake engines -> generate (DAPO: drop groups without reward
variance and generate again, up to max_regenerations) -> engines sleep -> onload trainer
-> advantages and train -> push weights -> checkpoint -> one log line. A held-out
evaluation of the previous step's weights, when due, runs right after the wake.
"""
import sys
import time

import torch
from tqdm import tqdm

from launcher.driver.rollout import chunk_seed, groups_per_chunk, make_chunks, sampling_params, score_group, split_generation
from launcher.driver.runtime import Runtime, generation_summary
from launcher.driver.train import train_on_groups


def _generate_round(rt: Runtime, step: int, round_index: int, n_prompts: int, bar) -> list:
    """Generate and score n_prompts new groups; returns (round, group index, Group) tuples."""
    alg, G = rt.config.algorithm, rt.config.algorithm.samples_per_prompt
    problems = rt.stream.take(rt.state.data_position, n_prompts)
    rt.state.data_position += n_prompts
    prompt_ids = [rt.tokenizer.encode(p.prompt) for p in problems]
    per_chunk = groups_per_chunk(rt.config.inference.concurrency_per_engine, G, n_prompts, len(rt.engines))
    seed = rt.config.run.seed
    chunks = make_chunks(prompt_ids, G, per_chunk, sampling_params(alg),
                         lambda c: chunk_seed(seed, step, round_index, c))
    pending = {rt.engines.submit(req, c): members for c, (members, req) in enumerate(chunks)}
    scored = []
    while pending:
        done = rt.engines.wait_done(list(pending))
        members = pending.pop(done[0])
        gen = rt.engines.result(done[0])
        for g, rows in split_generation(members, gen, G):
            group = score_group(problems[g], prompt_ids[g], gen, rows, rt.scorer, rt.tokenizer, rt.algorithm)
            scored.append((round_index, g, group))
        bar.update(len(members) * G)
    return scored


def fill_groups(generate_round, keep_group, wanted: int, max_regenerations: int) -> tuple[list, list, int]:
    """DAPO dynamic sampling: generate, keep groups `keep_group` accepts, and generate again
    for the shortfall, at most max_regenerations more rounds.

    `generate_round(round_index, n_prompts)` returns (round, group index, Group) tuples.
    Returns (kept groups in (round, index) order, at most `wanted`; every group seen; rounds).
    """
    kept, seen, rounds = [], [], 0
    while True:
        scored = generate_round(rounds, wanted - len(kept))
        seen += [s[2] for s in scored]
        kept += [s for s in scored if keep_group(torch.tensor(s[2].task_rewards))]
        rounds += 1
        if len(kept) >= wanted or rounds > max_regenerations:
            break
    kept.sort(key=lambda s: (s[0], s[1]))  # completion order varies; training order must not
    return [s[2] for s in kept[:wanted]], seen, rounds


def collect_groups(rt: Runtime, step: int) -> tuple[list, dict]:
    """The step's training groups (in a deterministic order) and generation statistics."""
    alg = rt.config.algorithm
    started = time.monotonic()
    bar = tqdm(desc=f"step {step} generate", unit="seq", leave=False, disable=not sys.stderr.isatty())

    def generate_round(round_index: int, n_prompts: int) -> list:
        bar.total = (bar.total or 0) + n_prompts * alg.samples_per_prompt
        return _generate_round(rt, step, round_index, n_prompts, bar)

    groups, seen, rounds = fill_groups(generate_round, rt.algorithm.keep_group, alg.prompts_per_step,
                                       alg.dynamic_sampling.max_regenerations)
    bar.close()
    stats = generation_summary(seen, time.monotonic() - started)
    stats.update(groups_kept=len(groups), regenerations=rounds - 1)
    return groups, stats


def run_sync(rt: Runtime) -> None:
    cfg = rt.config
    level = rt.plan.memory.sleep_level  # inference.sleep_level, or derived from the sync kind
    while rt.state.step < cfg.run.steps:
        step = rt.state.step + 1
        t0 = time.monotonic()
        if level:
            rt.trainers.call("offload")
            rt.engines.call("wake")
        rt.start_eval()  # step - 1's weights, once the engines are awake (launcher/driver/evaluate.py)
        t0 += rt.finish_eval()  # not the step's time
        groups, gen = collect_groups(rt, step)
        if level:
            rt.engines.call("sleep", level)
            rt.trainers.call("onload")
        t1 = time.monotonic()
        train, sync_s = {}, 0.0
        if groups:  # DAPO may find no group with reward variance even after regenerating
            train = train_on_groups(rt.trainers, groups, cfg.algorithm, rt.algorithm)
        t2 = time.monotonic()
        if groups:
            rt.state.policy_version += 1
        if groups or level >= 2:  # level 2 dropped the engines' weights: they need them back either way
            sync_s = rt.sync_weights(with_base=level >= 2, wait=True)
        rt.state.step = step
        rt.maybe_checkpoint()
        step_s = time.monotonic() - t0
        rt.log_step(_step_metrics(step, gen, train, t1 - t0, t2 - t1, sync_s, step_s, rt))
    if rt.evaluator is not None and rt.evaluator.due(rt.state.step):  # the last step's weights
        if level:
            rt.trainers.call("offload")
            rt.engines.call("wake")
        rt.start_eval()
        rt.finish_eval()


def _step_metrics(step, gen, train, rollout_s, train_s, sync_s, step_s, rt) -> dict:
    kl = train.get("kl_ref", train.get("rollout_kl", 0.0))
    return {"step": step, **gen, **train, "kl": kl, "rollout_s": rollout_s, "train_s": train_s, "sync_s": sync_s,
            "step_s": step_s, "other_s": step_s - gen["gen_s"] - train_s,
            "tokens_per_s": gen["generated_tokens"] / max(step_s, 1e-9),
            "policy_version": rt.state.policy_version, "data_position": rt.state.data_position}
