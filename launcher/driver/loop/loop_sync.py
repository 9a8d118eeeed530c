"""The synchronous colocated loop: engines and trainer ranks take turns on the same GPUs.

Per step: offload trainer -> wake engines -> the rollout canary (canary.py) -> generate
(DAPO: drop groups without reward variance and generate again, up to max_regenerations)
-> engines sleep -> onload trainer -> the canary scored and run.rollout_checks' bounds
(rollout_health.py) -> advantages and train -> push weights -> checkpoint -> one log line. A held-out
evaluation of the previous step's weights, when due, runs right after the wake.
The pieces the async loop runs too (sending, scoring, training, the row) are in step.py.
With algorithm.partial_rollout each sequence gets a token budget a step and the unfinished
ones are carried to the next (partial.py).

Each phase (generate, train, sync, checkpoint) is entered in phase.json (phase.py). A
background checkpoint is completed at the first phase boundary after its writes are over
(after generation, training and the sync). After a preemption signal the loop stops at the
next step boundary; the part of a step before the trainers start on it is droppable
(driver/loop/preemption.py): the step's data position is given back and the trainer takes the
GPUs again, so the driver can save the last completed step.
"""
import dataclasses
import sys
import time

from tqdm import tqdm

from launcher.driver.loop import partial
from launcher.driver.loop.preemption import StepDropped
from launcher.driver.loop.rollout import chunk_seed
from launcher.driver.loop.rollout_health import GENERATION_KEYS, TRAINING_KEYS
from launcher.driver.loop.runtime import Runtime
from launcher.driver.loop.step import (
    collect_scored,
    generation_summary,
    keep_on_task_rewards,
    send_prompts,
    step_metrics,
    timed_train,
)
from launcher.plan.loop import groups_per_chunk
from launcher.plan.preemption import rest_of_step_s


def _generate_round(rt: Runtime, step: int, round_index: int, n_prompts: int, bar) -> list:
    """Generate and score n_prompts new groups; returns (round, group index, Group) tuples."""
    samples, seed = rt.config.algorithm.samples_per_prompt, rt.config.run.seed
    per_chunk = groups_per_chunk(rt.config.inference.concurrency_per_engine, samples, n_prompts, len(rt.engines))
    pending = send_prompts(rt, n_prompts, per_chunk, lambda c: chunk_seed(seed, step, round_index, c))
    scored = []
    while pending:
        done = collect_scored(rt, pending)
        scored += [(round_index, g, group) for g, group in done]
        bar.update(len(done) * samples)
    return scored


def fill_groups(generate_round, keep_group, wanted: int, max_regenerations: int,
                carried_on=lambda: 0) -> tuple[list, list, int]:
    """DAPO dynamic sampling: generate, keep groups `keep_group` accepts, and generate again
    for the shortfall, at most max_regenerations more rounds.

    `generate_round(round_index, n_prompts)` returns (round, group index, Group) tuples;
    `carried_on()`: groups left unfinished so far, carried to the next step (partial.py), which
    fill the step's share as kept ones do.
    Returns (kept groups in (round, index) order, at most `wanted`; every group seen; rounds).
    """
    kept, seen, rounds = [], [], 0
    while True:
        scored = generate_round(rounds, wanted - len(kept) - carried_on())
        seen += [s[2] for s in scored]
        kept += [s for s in scored if keep_on_task_rewards(keep_group, s[2])]
        rounds += 1
        if len(kept) + carried_on() >= wanted or rounds > max_regenerations:
            break
    kept.sort(key=lambda s: (s[0], s[1]))  # completion order varies; training order must not
    return [s[2] for s in kept[:wanted]], seen, rounds


def collect_groups(rt: Runtime, step: int) -> tuple[list, dict, list]:
    """The step's training groups (in a deterministic order), generation statistics and every
    group generated (the kept and the dropped)."""
    alg = rt.config.algorithm
    started = time.monotonic()
    bar = tqdm(desc=f"step {step} generate", unit="seq", leave=False, disable=not sys.stderr.isatty())
    carry = partial.StepCarry(rt) if partial.active(rt) else None

    def generate_round(round_index: int, n_prompts: int) -> list:
        if carry is not None:
            return _generate_partial_round(rt, carry, step, round_index, n_prompts, bar)
        bar.total = (bar.total or 0) + n_prompts * alg.samples_per_prompt
        return _generate_round(rt, step, round_index, n_prompts, bar)

    groups, seen, rounds = fill_groups(generate_round, rt.algorithm.keep_group, alg.prompts_per_step,
                                       alg.dynamic_sampling.max_regenerations,
                                       carry.carried_on if carry is not None else lambda: 0)
    bar.close()
    stats = generation_summary(seen, time.monotonic() - started)
    stats.update(groups_kept=len(groups), groups_asked=alg.prompts_per_step, rounds=rounds, regenerations=rounds - 1)
    if carry is not None:
        stats.update(carry.finish(groups))
    return groups, stats, seen


def _generate_partial_round(rt: Runtime, carry, step: int, round_index: int, n_prompts: int, bar) -> list:
    """_generate_round with partial rollouts: the carried groups first, each sample one budget."""
    samples = rt.config.algorithm.samples_per_prompt
    per_chunk = groups_per_chunk(rt.config.inference.concurrency_per_engine, samples, max(n_prompts, 1),
                                 len(rt.engines))
    return carry.generate_round(round_index, n_prompts, per_chunk * samples,
                                lambda c: chunk_seed(rt.config.run.seed, step, round_index, c), bar)


def _engines_take_the_gpus(rt: Runtime, level: int, phase: str, step: int) -> None:
    """Sleep level 0 keeps both resident; otherwise the trainer steps aside for generation.
    Step `step`'s `phase` starts once it has: from there the driver waits on the engines."""
    if level:
        rt.trainers.call("offload")
    rt.enter_phase(phase, step)
    if level:
        rt.engines.call("wake")


def _trainer_takes_the_gpus(rt: Runtime, level: int, phase: str, step: int) -> None:
    """After generation the engines sleep at `level` and the trainer's state comes back.
    Step `step`'s `phase` starts once the engines sleep: from there the driver waits on the trainer."""
    if level:
        rt.engines.call("sleep", level)
    rt.enter_phase(phase, step)
    if level:
        rt.trainers.call("onload")


def run_sync(rt: Runtime) -> None:
    """Steps until run.steps, or until a preemption signal's step boundary."""
    level = rt.plan.memory.sleep_level  # inference.sleep_level, or derived from the sync kind
    while rt.state.step < rt.config.run.steps and not rt.preemption.requested:
        try:
            _run_step(rt, rt.state.step + 1, level)
        except StepDropped:
            return
    if rt.eval_due() and not rt.preemption.requested:  # the last step's weights
        _engines_take_the_gpus(rt, level, "evaluate", rt.state.step)
        rt.start_eval()
        rt.finish_eval()


def _generate(rt: Runtime, step: int, level: int) -> tuple[list, dict, list, float]:
    """The droppable part of a step: the engines take the GPUs, the previous step's evaluation,
    generation. (groups, stats, every group seen, seconds of evaluation). On StepDropped the
    state is as before the step and the trainer has the GPUs back."""
    before = dataclasses.replace(rt.state)
    try:
        with rt.preemption.droppable():
            _engines_take_the_gpus(rt, level, "generate", step)
            if rt.canary is not None:  # first on each engine: scored before the step trains (_run_step)
                rt.canary.send(f"the wake of step {step}" if level else f"step {step}")
            rt.start_eval()  # step - 1's weights, once the engines are awake (launcher/driver/loop/evaluate.py)
            eval_s = rt.finish_eval()  # not the step's time
            groups, gen, seen = collect_groups(rt, step)
            if not rt.preemption.may_start(rest_of_step_s(rt.plan)):
                raise StepDropped()
        return groups, gen, seen, eval_s
    except StepDropped:
        rt.state, rt.pending_eval = before, None  # the dropped step's prompts are drawn again on resume
        rt.engines.cancel_in_flight()
        if rt.canary is not None:
            rt.canary.drop()
        _trainer_takes_the_gpus(rt, level, "drop", step)
        sys.stderr.write(f"preemption: step {step} dropped before its trainers started on it\n")
        raise


def _run_step(rt: Runtime, step: int, level: int) -> None:
    """Generate, then train, then sync: each phase waits for the one before."""
    t0 = time.monotonic()
    groups, gen, seen, eval_s = _generate(rt, step, level)
    t0 += eval_s
    rt.health.check(step, gen, GENERATION_KEYS)  # run.rollout_checks: before training on the samples
    _trainer_takes_the_gpus(rt, level, "train", step)
    if rt.canary is not None:
        rt.canary.score()
    rt.poll_checkpoint()
    t1 = time.monotonic()
    # DAPO may find no group with reward variance even after regenerating (no_signal.py)
    train, train_s = timed_train(rt, groups) if groups else ({}, 0.0)
    rt.poll_checkpoint()
    sync_s = 0.0
    if groups:
        rt.state.policy_version += 1
    if groups or level >= 2:  # level 2 dropped the engines' weights: they need them back either way
        rt.enter_phase("sync", step)
        sync_s = rt.sync_weights(with_base=level >= 2, wait=True)
    rt.state.step = step
    rt.health.check(step, train, TRAINING_KEYS, defer=True)  # counted into this step's checkpoint
    if rt.checkpointer.due(step):
        rt.enter_phase("checkpoint", step)
    rt.maybe_checkpoint()
    step_s = time.monotonic() - t0
    rt.log_step(step_metrics(rt, gen, train, rollout_s=t1 - t0, train_s=train_s, sync_s=sync_s, step_s=step_s,
                             other_s=step_s - gen["gen_s"] - train_s))
    rt.health.raise_pending()
    rt.no_signal.sync_step(step, len(groups), gen["rounds"], seen, gen.get("partial_groups_carried", 0))
