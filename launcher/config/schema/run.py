"""`run:` section: identity, length, resumption and held-out evaluation of one training run."""
from dataclasses import dataclass, field
from typing import Optional

from launcher.config.schema.choices import StopSignal
from launcher.config.schema.rollout_checks import RolloutChecksConfig


@dataclass
class RunConfig:
    name: str = "run"
    """Run name; the run directory is `<output_dir>/<name>`. Sweeps append the point's overrides."""
    seed: int = 0
    """Seed for data order, sampling and init (Python, NumPy, torch); same seed + resume = same metrics."""
    steps: int = 10
    """Number of policy updates (RL steps), >= 1. Interacts with checkpoint.every_steps."""
    output_dir: str = "runs"
    """Parent folder of run directories (relative to the current directory or absolute). On a Ray
    cluster (cluster.ray_address set) trainers write checkpoints and the driver metrics here, so it must
    be an absolute path on storage every node sees (NFS, Lustre, ...): RUN003 warns when it is relative
    or node-local (/tmp, /dev/shm, ...); `submit` passes it to the job as an absolute path."""
    resume: str = "auto"
    """`auto`: continue from the newest checkpoint in the run directory if there is one;
    `never`: start fresh (refuses a run directory that already holds checkpoints);
    any other value: path of a checkpoint directory to continue from."""
    eval_every_steps: int = 0
    """Score the held-out set (launcher/driver/loop/evaluate.py) after every this many steps and after the
    last step; 0 = never, >= 0. The set is data.val_path, or for synthetic tasks without one
    run.eval_problems generated problems from a disjoint index range. Sync loop: between steps, with
    the weights just synced; async loop: the version pushed after the step (see evaluate.py)."""
    eval_before_train: bool = False
    """Also score the initial weights (step 0) before the first step; works with eval_every_steps=0."""
    eval_samples: int = 4
    """k of mean@k: responses per held-out problem sampled at algorithm.temperature/top_p besides the
    greedy one (temperature 0); 0 = greedy only. Separate from algorithm.samples_per_prompt so the
    cost of an evaluation does not grow with the GRPO group size."""
    eval_problems: Optional[int] = None
    """Held-out problems per evaluation, >= 1: the first N of data.val_path (file order); null = all
    of it, or 128 generated problems for a synthetic task without data.val_path."""
    hang_timeout_s: Optional[float] = None
    """Seconds the driver waits for an actor's call (generate, train_step, a weight-sync step, ...)
    before the run fails as hung (exit 3, naming the actor, the call and the time), > 0; null =
    derived per call from the plan: 3 x its phase's estimate, at least 120 s
    (launcher/driver/actors/deadlines.py). An actor's first call of a method (start-up, the first
    step's compilation) keeps its larger derived allowance (at least 600 s) when that is longer."""
    preemption_signals: list[StopSignal] = field(
        default_factory=lambda: [StopSignal.SIGTERM, StopSignal.SIGUSR1, StopSignal.SIGUSR2])
    """Signals that stop the run and save it (launcher/driver/loop/preemption.py): the step in flight
    finishes, or is dropped by the grace deadline while its trainers have not started on it; a
    checkpoint of the last completed step is written when the newest complete one is older; Ray
    stops; the exit code is 128 + the signal's number (SIGTERM 143, SIGUSR1 138, SIGUSR2 140) and
    the console names the checkpoint and the command that resumes. A second signal skips to the
    clean-up. A listed signal's default action (end at once) is replaced; SIGTERM left out
    still ends the run, at once and saving nothing new (exit 143). Ctrl-C (SIGINT) always stops
    at once (exit 130)."""
    preemption_grace_s: Optional[float] = None
    """Seconds from a preemption signal to the run's exit, > 0: the step in flight has this less
    the checkpoint write and Ray's stop to finish, else it is dropped. null = derived from the
    plan (launcher/plan/preemption.py: the longer of a step after its generation and one chunk of
    generation, the swap, a checkpoint write and 30 s for Ray's stop). `sbatch`
    asks Slurm for the signal this long before the time limit; `rayjob` gives the pods this
    terminationGracePeriodSeconds."""
    rollout_checks: RolloutChecksConfig = field(default_factory=RolloutChecksConfig)
    """Rollouts that cannot go silently wrong (launcher/driver/loop/rollout_health.py): the engine-vs-trainer canary
    and the bounds on each step's degeneration and mismatch metrics that warn, then stop the run (exit 3)."""
