"""What a loop works with: the two actor groups, the data, the algorithm, logs, checkpoints."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.driver.loop.data import PromptStream
from launcher.driver.loop.no_signal import NoSignalWatch
from launcher.driver.loop.preemption import Preemption
from launcher.driver.loop.rollout_health import HealthWatch
from launcher.driver.records.checkpoint import Checkpointer, DriverState, load_driver_state
from launcher.driver.records.metrics import StepLogger
from launcher.weight_sync.messages import SyncStats
from launcher.weight_sync.push import check_pending, engines_hold_base, sync_weights

if TYPE_CHECKING:  # only for the annotations: importing them here would pull in ray
    from launcher.config.schema import LauncherConfig
    from launcher.driver.actors.engine_group import EngineGroup
    from launcher.driver.actors.trainer_group import TrainerGroup
    from launcher.driver.loop.canary import Canary
    from launcher.driver.loop.episodes import EpisodeRunner
    from launcher.driver.loop.evaluate import Evaluator, PendingEval
    from launcher.plan import Plan
    from launcher.rl.algorithm import Algorithm
    from launcher.rl.reward_fn import RewardScorer
    from launcher.rl.tokenizer import Tokenizer


@dataclass
class Runtime:
    config: LauncherConfig
    plan: Plan
    run_dir: Path
    trainers: TrainerGroup
    """driver/actors/trainer_group.py TrainerGroup (or anything with its methods)."""
    engines: EngineGroup
    """driver/actors/engine_group.py EngineGroup."""
    tokenizer: Tokenizer
    stream: PromptStream
    algorithm: Algorithm
    logger: StepLogger
    checkpointer: Checkpointer
    state: DriverState = field(default_factory=DriverState)
    last_checkpoint: Path | None = None
    last_sync: SyncStats | None = None
    evaluator: Evaluator | None = None
    """evaluate.Evaluator when run.eval_every_steps / eval_before_train ask for evaluations."""
    pending_eval: PendingEval | None = None
    """The evaluation start_eval sent and finish_eval has not collected yet."""
    checkpoint_stats: dict = field(default_factory=dict)
    """checkpoint_blocked_s / checkpoint_write_s of the step being logged."""
    scorer: RewardScorer | None = None
    """reward_fn.RewardScorer of data.task / data.reward_fn; built here when not given, so a
    data.reward_fn that cannot be imported fails before the first step."""
    preemption: Preemption = field(default_factory=lambda: Preemption([], 0.0, 0.0, "no signal handled"))
    """preemption.py: the signal that asks the loop to stop, and the step deadline it set."""
    no_signal: NoSignalWatch | None = None
    """no_signal.py: dynamic sampling's short and empty steps; built from the config when not given."""
    canary: Canary | None = None
    """canary.py: the engine-vs-trainer check (launch.py builds it when run.rollout_checks.canary.prompts > 0)."""
    health: HealthWatch | None = None
    """rollout_health.py: run.rollout_checks' bounds; built from the config when not given."""
    episodes: EpisodeRunner | None = None
    """episodes.py: data.environment's environment class and step pool (launch.py builds it before Ray); None:
    one response per prompt."""

    def __post_init__(self):
        if self.scorer is None:
            from launcher.rl.reward_fn import make_scorer

            self.scorer = make_scorer(self.config.data)
        if self.no_signal is None:
            self.no_signal = NoSignalWatch(self.config.algorithm)
        if self.health is None:
            self.health = HealthWatch(self.config.run.rollout_checks, self)

    def enter_phase(self, name: str, step: int | None = None) -> None:
        """The run's phase (phase.py: phase.json, and the phase a preemption signal's message names)."""
        self.preemption.phase.enter(name, step)

    def sync_weights(self, with_base: bool, wait: bool) -> float:
        """Stream the trainer's weights (policy version `state.policy_version`) to every
        engine by the plan's transport (launcher/weight_sync/push.py: buckets, or vLLM's GPU
        transfer); returns the seconds it took.

        wait=False (async): the engines take the update after the chunks already queued on
        them; this returns once its last bucket is handed over (the export has then read
        every weight, so the trainer may take its next step).

        with_base is dropped when the engines serve the very checkpoint the trainer adapts
        (weight_sync/push.py engines_hold_base): the first adapter sync then ships the adapter alone."""
        started = time.monotonic()
        if self.last_sync is not None:
            check_pending(self.engines, self.last_sync.pending)
        if with_base and engines_hold_base(self.engines, self.plan.sync.kind, self.config.model.hf_path):
            with_base = False
        self.last_sync = sync_weights(self.trainers, self.engines, self.state.policy_version, with_base, wait)
        return time.monotonic() - started

    def poll_checkpoint(self) -> None:
        """At a phase boundary: complete the background checkpoint as soon as every trainer
        rank's write is over (a non-blocking question to each), not a step later."""
        if self.checkpointer.pending is not None and all(self.trainers.call("checkpoint_written")):
            self.finish_checkpoint()

    def maybe_checkpoint(self) -> None:
        """At the end of step `state.step`: complete the background checkpoint if its writes are
        over, then start this step's if due (save() first waits for a write still running): the
        trainers write it in the background (async_write)."""
        self.poll_checkpoint()
        if self.checkpointer.due(self.state.step):
            self.checkpoint_stats.update(self.checkpointer.save(self.trainers, self.state, async_write=True))

    def finish_checkpoint(self) -> None:
        """The pending checkpoint's writes waited for and it marked complete (its write seconds
        go into the next row)."""
        self.checkpoint_stats.update(self.checkpointer.finish(self.trainers))
        self.last_checkpoint = self.checkpointer.last or self.last_checkpoint

    def save_on_stop(self) -> None:
        """After a preemption signal stopped the loop at a step boundary: the background write
        completed, then the last completed step saved when the newest complete checkpoint is
        older (step 0 needs none: a fresh start repeats it)."""
        self.finish_checkpoint()
        newest = self.checkpointer.latest()
        if self.state.step > (load_driver_state(newest).step if newest else 0):
            self.checkpointer.save(self.trainers, self.state)
            self.last_checkpoint = self.checkpointer.last

    def complete_write_on_exit(self, timeout_s: float) -> None:
        """On a failed or interrupted run: the background checkpoint completed when every
        trainer rank finishes its write within timeout_s (a dead, failed or busy rank: it stays
        a `.partial`, which the next start removes)."""
        if self.checkpointer.pending is None:
            return
        written = self.trainers.answered_within("finalize_checkpoint", timeout_s)
        if written is None:
            return
        self.checkpointer.mark_complete(lambda: max(written))
        self.last_checkpoint = self.checkpointer.last

    def log_step(self, metrics: dict) -> None:
        """One step's row, with the checkpoint seconds of this step (blocked, and the
        previous checkpoint's background write) when there were any."""
        self.logger.log({**metrics, **self.checkpoint_stats, **(self.canary.take_row() if self.canary else {})})
        self.checkpoint_stats = {}

    def eval_due(self) -> bool:
        """Whether step `state.step` gets a held-out evaluation (launcher/driver/loop/evaluate.py
        says when and why); the sync loop asks before waking the engines for the last one."""
        return self.evaluator is not None and self.evaluator.due(self.state.step)

    def start_eval(self) -> None:
        """Send the evaluation of step `state.step` (the engines' weights, policy version
        `state.policy_version`) when it is due."""
        if self.eval_due():
            self.pending_eval = self.evaluator.submit(self.engines, self.state.step, self.state.policy_version)

    def finish_eval(self) -> float:
        """Collect, score and log the evaluation start_eval sent; its seconds (0.0 without one)."""
        if self.pending_eval is None:
            return 0.0
        pending, self.pending_eval = self.pending_eval, None
        row = self.evaluator.collect(self.engines, pending, self.scorer, self.tokenizer)
        self.logger.log_eval(row)
        return row["eval/time_s"]

