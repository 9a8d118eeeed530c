"""`run:` section: identity, length and resumption of one training run."""
from dataclasses import dataclass


@dataclass
class RunConfig:
    name: str = "run"
    """Run name; the run directory is `<output_dir>/<name>`. Sweeps append the point's overrides."""
    seed: int = 0
    """Seed for data order, sampling and init (Python, NumPy, torch); same seed + resume = same metrics."""
    steps: int = 10
    """Number of policy updates (RL steps), >= 1. Interacts with checkpoint.every_steps."""
    output_dir: str = "runs"
    """Parent folder of run directories (relative to the current directory or absolute)."""
    resume: str = "auto"
    """`auto`: continue from the newest checkpoint in the run directory if there is one;
    `never`: start fresh (refuses a run directory that already holds checkpoints);
    any other value: path of a checkpoint directory to continue from."""
