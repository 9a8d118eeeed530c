"""Checkpoints: trainer state (model or adapter, optimizer, RNG) plus the driver's state
(step, policy version, data position), saved atomically.

A checkpoint is written into a hidden `.partial` folder and renamed into place only when
every part is on disk, so a crash while saving never leaves a checkpoint that looks
complete; `latest` only ever returns complete ones.
"""
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

PREFIX = "step_"
DONE_MARK = "COMPLETE"


@dataclass
class DriverState:
    step: int = 0
    """Completed RL steps."""
    policy_version: int = 0
    """Weight updates applied so far (engines generating with version v are v updates old)."""
    data_position: int = 0
    """Problems drawn from the prompt stream so far."""


class Checkpointer:
    def __init__(self, root: Path, every_steps: int, keep: int, total_steps: int):
        self.root, self.every, self.keep, self.total = Path(root), every_steps, max(keep, 1), total_steps

    def due(self, step: int) -> bool:
        return step == self.total or (self.every > 0 and step % self.every == 0)

    def complete(self) -> list[Path]:
        if not self.root.exists():
            return []
        found = [p for p in self.root.glob(f"{PREFIX}*") if (p / DONE_MARK).exists()]
        return sorted(found, key=lambda p: int(p.name.removeprefix(PREFIX)))

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1] if done else None

    def save(self, trainers, state: DriverState) -> Path:
        final = self.root / f"{PREFIX}{state.step:06d}"
        partial = self.root / f".{final.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        trainers.call("save_checkpoint", str(partial / "trainer"))
        (partial / "driver.json").write_text(json.dumps(asdict(state)))
        (partial / DONE_MARK).write_text("")
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        for old in self.complete()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final


def load_driver_state(path: Path) -> DriverState:
    return DriverState(**json.loads((Path(path) / "driver.json").read_text()))


def checkpoint_root(config, run_dir: Path) -> Path:
    return Path(config.checkpoint.dir) if config.checkpoint.dir else Path(run_dir) / "checkpoints"


class ResumeError(RuntimeError):
    """run.resume cannot be honoured (no such checkpoint, or checkpoints where none may be)."""


def resolve_resume(resume: str, ckpt: Checkpointer) -> Path | None:
    """The checkpoint to continue from for `run.resume` (auto | never | a path), or None."""
    latest = ckpt.latest()
    if resume == "auto":
        return latest
    if resume == "never":
        if latest is not None:
            raise ResumeError(f"run.resume=never but {ckpt.root} already holds checkpoints (newest {latest.name}); "
                              "use run.resume=auto to continue it, or a new run.name to start fresh")
        return None
    path = Path(resume)
    if not (path / DONE_MARK).exists():
        raise ResumeError(f"run.resume={resume} is not a complete checkpoint folder (no {DONE_MARK} file in it)")
    return path
