"""Checkpoints: trainer state (model or adapter, optimizer, RNG) plus the driver's state
(step, policy version, data position, partial rollouts' carried sequences), saved atomically and checked when read.

Writing: a checkpoint goes into a hidden `.partial` folder, renamed into place only when
every part is on disk, so a crash while saving never leaves a checkpoint that looks
complete; a `.partial` left by an interrupted write is removed when the next run starts,
and one whose write failed is removed at once. Before writing, the free space is checked
against the size of the newest checkpoint (the next one is as large), while the older
ones still stand: they are deleted (checkpoint.keep) only once the new one is complete.

Reading: `files.json` lists every file of a checkpoint with the size written. A missing or
short file, or an unreadable driver.json, makes a checkpoint damaged; so does a trainer
rank's load_checkpoint raising. run.resume=auto then takes the checkpoint before it and
says which one it skipped and why; an explicit run.resume=PATH fails naming the file.
"""
import contextlib
import errno
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from launcher.contract.errors import CheckpointError, DamagedCheckpointError

PREFIX = "step_"
DONE_MARK = "COMPLETE"
DRIVER_FILE = "driver.json"
FILES = "files.json"
GIB = 2**30
SPACE_MARGIN = 1.1
"""Free space asked for, as a multiple of the newest checkpoint's size: a disk filled to the
last byte would fail the run's next metrics or log write instead."""
FULL_DISK_BYTES = 64 * 2**20
"""A failed write that leaves less than this free is reported as the disk running full."""
MAX_REASON_CHARS = 300
"""Of an error's first line, in the one-line reason a skipped checkpoint is given."""


@dataclass
class DriverState:
    step: int = 0
    """Completed RL steps."""
    policy_version: int = 0
    """Weight updates applied so far (engines generating with version v are v updates old)."""
    data_position: int = 0
    """Problems drawn from the prompt stream so far."""
    carried: list[dict] = field(default_factory=list)
    """Partial rollouts: the groups left unfinished by step `step`, continued first by the next
    (launcher/driver/loop/partial.py PartialGroup as JSON); empty without them."""
    checks_in_a_row: dict[str, int] = field(default_factory=dict)
    """run.rollout_checks: per metric, the steps in a row up to `step` past its stop bound
    (launcher/driver/loop/rollout_health.py), so a resume counts on where the run stopped."""


class ResumeError(CheckpointError):
    """run.resume cannot be honoured (no such checkpoint, or checkpoints where none may be)."""


def warn(message: str) -> None:
    sys.stderr.write(f"checkpoint: {message}\n")
    sys.stderr.flush()


def _step_of(path: Path) -> int:
    return int(path.name.removeprefix(PREFIX))


def _gib(n_bytes: float) -> str:
    gib = n_bytes / GIB
    return f"{gib:.1f}" if gib >= 10 else f"{gib:.3g}"


def _file_sizes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


class Checkpointer:
    def __init__(self, root: Path, every_steps: int, keep: int, total_steps: int):
        self.root, self.every, self.keep, self.total = Path(root), every_steps, max(keep, 1), total_steps
        self.pending: tuple[Path, Path] | None = None
        """(.partial folder, final folder) of a checkpoint whose trainer writes may still run."""
        self.last: Path | None = None
        """The newest checkpoint this run completed."""
        self._remove_unfinished()

    def _remove_unfinished(self) -> None:
        """The `.partial` of a write an earlier run did not finish (killed while saving)."""
        if not self.root.is_dir():
            return
        for partial in sorted(self.root.glob(f".{PREFIX}*.partial")):
            shutil.rmtree(partial, ignore_errors=True)
            warn(f"removed {partial}: a checkpoint write that an earlier run did not finish")

    def due(self, step: int) -> bool:
        return step == self.total or (self.every > 0 and step % self.every == 0)

    def complete(self) -> list[Path]:
        if not self.root.exists():
            return []
        found = [p for p in self.root.glob(f"{PREFIX}*") if (p / DONE_MARK).exists()]
        return sorted(found, key=_step_of)

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1] if done else None

    def newest_usable(self, before: Path | None = None) -> Path | None:
        """The newest complete checkpoint that is not damaged (older than `before` when
        given); each newer one it passes over is named on stderr with the reason."""
        done = [p for p in self.complete() if before is None or _step_of(p) < _step_of(before)]
        for path in reversed(done):
            problem = damage(path)
            if problem is None:
                return path
            warn(f"skipping {path}: {problem}")
        return None

    def save(self, trainers, state: DriverState, async_write: bool = False) -> dict:
        """Write the checkpoint of `state.step`. With `async_write` the trainers only copy
        their tensors to host memory and write in the background: the checkpoint stays a
        `.partial` (never `latest`) until finish() has every rank's write done. Returns
        {"checkpoint_blocked_s": seconds training waited}."""
        self.finish(trainers)
        final = self.root / f"{PREFIX}{state.step:06d}"
        partial = self.root / f".{final.name}.partial"
        self.root.mkdir(parents=True, exist_ok=True)
        self._check_space(final.name)
        shutil.rmtree(partial, ignore_errors=True)
        started = time.monotonic()
        with self._removing_on_failure(partial, final.name):
            partial.mkdir()
            trainers.call("save_checkpoint", str(partial / "trainer"), async_write)
            (partial / DRIVER_FILE).write_text(json.dumps(asdict(state)))
        self.pending = (partial, final)
        stats = {"checkpoint_blocked_s": time.monotonic() - started}
        if not async_write:
            stats.update(self.finish(trainers))
        return stats

    def finish(self, trainers) -> dict:
        """Complete the pending checkpoint, if any: wait for the trainers' writes, then list
        its files, mark it COMPLETE, rename it into place and drop the oldest. Returns
        {"checkpoint_write_s": the slowest rank's write seconds} ({} when none was pending)."""
        if self.pending is None:
            return {}
        return self.mark_complete(lambda: max(trainers.call("finalize_checkpoint")))

    def mark_complete(self, finalize) -> dict:
        """finish() once `finalize()` returned the slowest rank's write seconds (it raises when
        a write failed): the pending checkpoint listed, marked COMPLETE and renamed into place."""
        (partial, final), self.pending = self.pending, None
        with self._removing_on_failure(partial, final.name):
            write_s = finalize()
            (partial / FILES).write_text(json.dumps(_file_sizes(partial)))
            (partial / DONE_MARK).write_text("")
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        self.last = final
        for old in self.complete()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return {"checkpoint_write_s": write_s}

    @contextlib.contextmanager
    def _removing_on_failure(self, partial: Path, name: str):
        """Any failure removes the unfinished folder; a full disk is said so."""
        try:
            yield
        except BaseException as err:
            full = isinstance(err, Exception) and _disk_full(err, self.root)
            shutil.rmtree(partial, ignore_errors=True)
            if full:
                raise CheckpointError(f"no space left on {self.root} while writing {name} ({error_reason(err)}); "
                                      f"removed its unfinished {partial.name}. Free space there, lower "
                                      f"checkpoint.keep (now {self.keep}) or set checkpoint.dir to a larger disk") from err
            raise

    def _check_space(self, name: str) -> None:
        """Room for one more checkpoint as large as the newest, before writing any of it."""
        newest = self.latest()
        if newest is None:
            return  # the first one: no size to go by
        size = sum(_file_sizes(newest).values())
        need, have = size * SPACE_MARGIN, shutil.disk_usage(self.root).free
        if have < need:
            raise CheckpointError(
                f"no space left on {self.root}: need {_gib(need)} GiB, have {_gib(have)} GiB (for {name}, sized "
                f"as {newest.name}: {_gib(size)} GiB x {SPACE_MARGIN}; nothing was written). Free space there, "
                f"lower checkpoint.keep (now {self.keep}) or set checkpoint.dir to a larger disk")


def _disk_full(err: BaseException, root: Path) -> bool:
    """Whether a failed write ran out of space: ENOSPC somewhere in its causes (torch's
    zip writer reports it only as a failed `enforce`), or next to nothing left free."""
    seen: BaseException | None = err
    while seen is not None:
        if getattr(seen, "errno", None) == errno.ENOSPC or "No space left" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    try:
        return shutil.disk_usage(root).free < FULL_DISK_BYTES
    except OSError:
        return False


def load_driver_state(path: Path) -> DriverState:
    file = Path(path) / DRIVER_FILE
    try:
        text = file.read_text()
        return DriverState(**json.loads(text))
    except (OSError, ValueError, TypeError) as err:
        why = "it is empty" if file.is_file() and file.stat().st_size == 0 else f"{type(err).__name__}: {err}"
        raise DamagedCheckpointError(f"{file} is damaged or unreadable ({why})") from err


def damage(path: Path) -> str | None:
    """Why the complete checkpoint at `path` cannot be resumed from, or None when it can.

    Checks what the driver can without the trainers: driver.json parses, and every file in
    files.json is there with its written size (checkpoints from before files.json: only
    driver.json)."""
    path = Path(path)
    try:
        load_driver_state(path)
    except DamagedCheckpointError as err:
        return str(err)
    listing = path / FILES
    if not listing.exists():
        return None
    try:
        sizes = json.loads(listing.read_text())
    except (OSError, ValueError) as err:
        return f"{listing} is damaged or unreadable ({type(err).__name__}: {err})"
    for name, size in sizes.items():
        file = path / name
        if not file.is_file():
            return f"{file} is missing"
        if (actual := file.stat().st_size) != size:
            return f"{file} is {actual} bytes, {size} were written (cut short or overwritten)"
    return None


def checkpoint_root(config, run_dir: Path) -> Path:
    return Path(config.checkpoint.dir) if config.checkpoint.dir else Path(run_dir) / "checkpoints"


def resolve_resume(resume: str, ckpt: Checkpointer) -> Path | None:
    """The checkpoint to continue from for `run.resume` (auto | never | a path), or None.

    auto skips damaged checkpoints for the newest usable one; a path must be usable itself."""
    if resume == "auto":
        usable = ckpt.newest_usable()
        if usable is None and ckpt.latest() is not None:
            raise ResumeError(f"run.resume=auto: every checkpoint in {ckpt.root} is damaged (reasons above); "
                              "move them away to start afresh, or repair one and give its folder as run.resume")
        return usable
    latest = ckpt.latest()
    if resume == "never":
        if latest is not None:
            raise ResumeError(f"run.resume=never but {ckpt.root} already holds checkpoints (newest {latest.name}); "
                              "use run.resume=auto to continue it, or a new run.name to start fresh")
        return None
    path = Path(resume)
    if not (path / DONE_MARK).exists():
        raise ResumeError(f"run.resume={resume} is not a complete checkpoint folder (no {DONE_MARK} file in it)")
    if (problem := damage(path)) is not None:
        raise ResumeError(f"run.resume={resume} is damaged: {problem}")
    return path


def error_reason(err: BaseException) -> str:
    """One line for a load that raised: the rank's own exception, not Ray's wrapping of it."""
    cause = getattr(err, "cause", None) or err
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0][:MAX_REASON_CHARS]}" if lines else type(cause).__name__
