"""`#SBATCH --time` for a run: Slurm kills a job at its limit, and a scheduler backfills short
jobs first, so the limit comes from the plan rather than a fixed guess.

    limit = TIME_MARGIN x (start-up + run.steps x step + checkpoints x checkpoint) + Ray bring-up + grace

The phase estimates are the ones the driver's hang deadlines use (launcher/driver/actors/deadlines.py
phase_estimates_s, from plan.timing, plan.sync and plan.startup): one step is generation + weight
sync + log-prob pass + training; a checkpoint is written every checkpoint.every_steps and after
the last step. Held-out evaluations (run.eval_every_steps) have no estimate and are covered by
the margin only. Ray bring-up is the script's own readiness wait; the grace is
run.preemption_grace_s (launcher/plan/preemption.py), before the limit, when Slurm signals the
run to save and stop (`--signal`): the run's planned work ends before it. Rounded up to a whole minute.
"""
import bisect
import math
from dataclasses import dataclass

from launcher.driver.actors.deadlines import phase_estimates_s

TIME_MARGIN = 2.0
"""The phase estimates are pessimistic already; twice them again, because a job killed at its limit
loses the steps since its last checkpoint, while a long limit only costs queue priority."""
STEP_PHASES = ("generation + weight sync", "log-prob pass", "training")


@dataclass(frozen=True)
class TimeLimit:
    """The limit of a job of `steps` steps, kept as its parts so that the steps fitting a shorter
    limit (a partition's MaxTime) can be named in the refusal."""

    steps: int
    step_s: float
    startup_s: float
    checkpoint_s: float
    every_steps: int
    """checkpoint.every_steps (0: only after the last step)."""
    bring_up_s: float
    grace_s: float = 0.0
    """run.preemption_grace_s: Slurm signals the run this long before the limit."""

    def seconds_for(self, steps: int) -> int:
        ckpts = checkpoints_written(steps, self.every_steps)
        work = self.startup_s + steps * self.step_s + ckpts * self.checkpoint_s
        return math.ceil((TIME_MARGIN * work + self.bring_up_s + self.grace_s) / 60) * 60

    @property
    def seconds(self) -> int:
        return self.seconds_for(self.steps)

    @property
    def slurm(self) -> str:
        return clock(self.seconds)

    @property
    def basis(self) -> str:
        """How `seconds` was derived, written into the script as a comment."""
        ckpts = checkpoints_written(self.steps, self.every_steps)
        return (f"{TIME_MARGIN:g} x (start-up {self.startup_s:.0f} s + {self.steps} steps x {self.step_s:.1f} s + "
                f"{ckpts} checkpoint(s) x {self.checkpoint_s:.0f} s) + {self.bring_up_s:.0f} s Ray bring-up + "
                f"{self.grace_s:.0f} s preemption grace, in whole minutes")

    def steps_within(self, max_s: int) -> int:
        """The most steps (up to `steps`) whose limit is at most `max_s`; 0 when not even one fits.
        The limit grows with the steps, so a bisection finds it."""
        return max(bisect.bisect_right(range(self.steps + 1), max_s, key=self.seconds_for) - 1, 0)


def clock(seconds: int) -> str:
    """Slurm's D-HH:MM:SS form of a duration."""
    days, rest = divmod(seconds, 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def checkpoints_written(steps: int, every_steps: int) -> int:
    """How many checkpoints a run of `steps` writes (launcher/driver/records/checkpoint.py Checkpointer.due)."""
    periodic = steps // every_steps if every_steps > 0 else 0
    return periodic + (0 if every_steps > 0 and steps % every_steps == 0 else 1)


def time_limit(config, plan, bring_up_s: float, grace_s: float = 0.0) -> TimeLimit:
    """The job's limit for `config.run.steps` steps from the plan's estimates (module docstring)."""
    phases = phase_estimates_s(plan, config.cluster.gpus_per_node)
    return TimeLimit(steps=config.run.steps, step_s=sum(phases[p] for p in STEP_PHASES),
                     startup_s=phases["start-up"], checkpoint_s=phases["checkpoint"],
                     every_steps=config.checkpoint.every_steps, bring_up_s=bring_up_s, grace_s=grace_s)
