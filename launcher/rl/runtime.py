"""What a loop works with: the two actor groups, the data, the algorithm, logs, checkpoints."""
import time
from dataclasses import dataclass, field
from pathlib import Path

from launcher.rl.checkpoint import Checkpointer, DriverState
from launcher.rl.data import PromptStream
from launcher.rl.metrics import StepLogger
from launcher.rl.weight_sync import SyncStats, check_pending, sync_weights


@dataclass
class Runtime:
    config: object
    plan: object
    run_dir: Path
    trainers: object
    """orchestrate.groups.TrainerGroup (or anything with its methods)."""
    engines: object
    """orchestrate.groups.EngineGroup."""
    tokenizer: object
    stream: PromptStream
    algorithm: object
    logger: StepLogger
    checkpointer: Checkpointer
    state: DriverState = field(default_factory=DriverState)
    last_checkpoint: Path | None = None
    last_sync: SyncStats | None = None

    def sync_weights(self, with_base: bool, wait: bool) -> float:
        """Stream the trainer's weights (policy version `state.policy_version`) to every
        engine, bucket by bucket (weight_sync.py); returns the seconds it took.

        wait=False (async): the engines take the update after the chunks already queued on
        them; this returns once its last bucket is handed over (the export has then read
        every weight, so the trainer may take its next step)."""
        started = time.monotonic()
        if self.last_sync is not None:
            check_pending(self.engines, self.last_sync.pending)
        self.last_sync = sync_weights(self.trainers, self.engines, self.state.policy_version, with_base, wait)
        return time.monotonic() - started

    def maybe_checkpoint(self) -> None:
        if self.checkpointer.due(self.state.step):
            self.last_checkpoint = self.checkpointer.save(self.trainers, self.state)


def generation_summary(groups_seen: list, seconds: float) -> dict:
    """Reward, accuracy and length over every sample generated (dropped groups included)."""
    rewards = [r for g in groups_seen for r in g.task_rewards]
    correct = [c for g in groups_seen for c in g.correct]
    lengths = [len(t) for g in groups_seen for t in g.responses]
    n = max(len(rewards), 1)
    return {"reward": sum(rewards) / n, "accuracy": sum(correct) / n, "response_len": sum(lengths) / n,
            "generated_tokens": sum(lengths), "groups_generated": len(groups_seen), "gen_s": seconds}
