"""Which phase of which step the run is in: `phase.json` in the run directory, and the
phase a preemption signal arrived in.

A step of the 4-layer slice takes minutes and prints one line at its end; in between, a
person or a monitoring script cannot tell a slow sync from a hung one, nor where a
preemption caught the run. Each phase entry rewrites `phase.json` (replaced whole, so a
reader never sees half of it):

    {"step": 3, "phase": "train", "started_unix_s": 1764886203.4}

launch.py enters `start-up` as Ray starts, then `loop` as the loop starts, and `save` for a
preemption's save. The sync loop (loop_sync.py) enters, for the step in flight (`step`):
- `generate` once the trainer has stepped aside: the previous step's held-out evaluation
  when due, the engines generate, the driver scores, the engines go to sleep;
- `train` once the engines sleep: the trainer takes the GPUs back and trains;
- `sync`, then `checkpoint` when one is due;
- `drop` for a step dropped after a preemption signal (the trainer takes the GPUs back);
- `evaluate` for the last step's held-out evaluation.
So a phase starts when the driver starts waiting on the group that does it. The async loop
(loop_async.py), whose engines generate all the time, names what the driver waits on for the
step in flight: `wait-groups` until its batch of groups is ready, `train` while it trains
(generation goes on meanwhile, for the steps after it), `sync`, `evaluate` (collecting the
previous step's held-out evaluation, or after the last step its own) and `checkpoint` when
one is due. After the run ends the file names its last phase (the failed one, the save, or
the last step's).
"""
import json
import os
import time
from pathlib import Path

PHASE_FILE = "phase.json"


class RunPhase:
    """The run's current phase, in memory (for the preemption message) and in `phase.json`."""

    def __init__(self, run_dir: Path | None):
        """run_dir None: kept in memory only (a Runtime built without a run, in unit tests)."""
        self.file = Path(run_dir) / PHASE_FILE if run_dir is not None else None
        self.name, self.step = "start-up", None
        """Written once entered (launch.py: after the checks before Ray, which may refuse the run)."""

    def enter(self, name: str, step: int | None = None) -> None:
        """`name` starts now; `step` is the step in flight (None: a phase of the whole run)."""
        self.name, self.step = name, step
        self._write()

    def describe(self) -> str:
        """`step 3's train`, or `the start-up` for a phase of the whole run."""
        return f"step {self.step}'s {self.name}" if self.step is not None else f"the {self.name}"

    def _write(self) -> None:
        if self.file is None:
            return
        scratch = self.file.with_name(self.file.name + ".tmp")
        scratch.write_text(json.dumps({"step": self.step, "phase": self.name, "started_unix_s": time.time()}))
        os.replace(scratch, self.file)
