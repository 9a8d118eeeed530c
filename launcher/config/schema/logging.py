"""`logging:` section: where per-step metrics go."""
from dataclasses import dataclass, field
from typing import Optional

from launcher.config.schema.choices import LogBackend, WandbMode


@dataclass
class WandbConfig:
    project: str = "glm5-rl"
    """wandb project name."""
    entity: Optional[str] = None
    """wandb entity (team); null = the API key's default."""
    mode: WandbMode = WandbMode.offline
    """`online` needs WANDB_API_KEY; without one the run falls back to `offline`."""


@dataclass
class LoggingConfig:
    backends: list[LogBackend] = field(default_factory=lambda: [LogBackend.console, LogBackend.jsonl])
    """Metric sinks: console (one line per step), jsonl (`<run dir>/metrics.jsonl`), wandb."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """Used only when `wandb` is among backends."""
    samples: bool = False
    """Write every trained sequence to `<run dir>/samples.jsonl`: its tokens, behaviour
    log-probs and the policy version of each token (launcher/driver/records/samples_log.py)."""
