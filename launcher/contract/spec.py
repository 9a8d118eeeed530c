"""What every worker actor is built from: the composed config, the driver's one plan, and
the actor's place. Actors read derived numbers (resolved etp, GPU share, bucket bytes,
engine slots) from the plan they are handed; none of them plans again, so a worker cannot
disagree with what `plan` printed and `validate` checked.
"""
from dataclasses import dataclass
from typing import Any

from launcher.config.schema import LauncherConfig
from launcher.plan import Plan, make_plan


@dataclass(frozen=True)
class ActorSpec:
    config: LauncherConfig
    """The composed, typed config (launcher/config/compose.py)."""
    plan: Plan
    rank: int
    """Trainer rank, or engine index."""
    world: int = 1
    """Trainer ranks in the group (1 for an engine)."""
    board: Any = None
    """The run's start-up board (a Ray actor handle, launcher/driver/actors/startup.py) the actor
    reports its phases to; None outside a run (tests, benchmarks)."""

    @classmethod
    def planned(cls, config: LauncherConfig, rank: int = 0, world: int = 1) -> "ActorSpec":
        """A spec with a fresh plan: for a worker built outside the driver (tests, benchmarks)."""
        return cls(config, make_plan(config), rank, world)
