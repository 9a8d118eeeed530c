"""`checkpoint:` section: when and where training state is saved."""
from dataclasses import dataclass
from typing import Optional


@dataclass
class CheckpointConfig:
    every_steps: int = 0
    """Save model/adapter, optimizer, RNG, data position and policy version every N steps;
    0 = only at the end. The final step always saves."""
    keep: int = 2
    """Checkpoints kept on disk (older ones are deleted), >= 1."""
    dir: Optional[str] = None
    """Checkpoint folder; null = `<run dir>/checkpoints`."""
