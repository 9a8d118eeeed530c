"""End-to-end run helpers: `python -m launcher` in a subprocess on the embedded Ray."""
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
RAY_DAEMONS = ("raylet", "gcs_server")
# Small batches keep the bookkeeping tests (resume, crash) to a few seconds of training.
SMALL = ["algorithm.prompts_per_step=4", "algorithm.mini_batch_prompts=4", "algorithm.samples_per_prompt=8"]
TEST_RECIPE = "recipe=tiny_grpo"
"""Runs that name no recipe get tiny_grpo (generated problems, character tokenizer: seconds
per test), not the default recipe, whose chat-templated parquet task is the minutes-long demo."""


def _foreground_signals() -> None:
    """The launcher gets Ctrl-C as a terminal's foreground process does. A test session
    started in the background (`cmd &` in a script) ignores SIGINT, every child inherits
    that, and Python then installs no KeyboardInterrupt handler: `interrupt()` did nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Run:
    """A launcher subprocess, the Ray daemons it started, and its run directory."""

    def __init__(self, out_dir: Path, name: str, overrides: list[str]):
        self.dir = out_dir / name
        recipe = [] if any(o.startswith("recipe=") for o in overrides) else [TEST_RECIPE]
        cmd = [sys.executable, "-m", "launcher", *recipe, f"run.output_dir={out_dir}", f"run.name={name}", *overrides]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, preexec_fn=_foreground_signals)
        self.daemons: dict[int, str] = {}
        self._stderr_seen = ""
        """What wait_for_stderr read of stderr so far; finish() returns it ahead of the rest."""

    def _note_daemons(self) -> None:
        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                if child.name() in RAY_DAEMONS:
                    self.daemons[child.pid] = child.name()
        except psutil.NoSuchProcess:
            pass

    def rows(self) -> list[dict]:
        """Every row of metrics.jsonl."""
        file = self.dir / "metrics.jsonl"
        if not file.exists():
            return []
        return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]

    def metrics(self) -> list[dict]:
        """The training and evaluation rows (the start-up rows, one per launch, left out)."""
        return [row for row in self.rows() if "startup" not in row]

    def startup_rows(self) -> list[dict]:
        return [row for row in self.rows() if "startup" in row]

    def wait_for_step(self, step: int, timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._note_daemons()
            if len(self.metrics()) >= step:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"run ended before step {step}:\n{self._ended()}")
            time.sleep(0.1)
        raise AssertionError(f"no step {step} within {timeout_s} s")

    def phase(self) -> dict | None:
        """The run's phase.json (launcher/driver/records/phase.py), or None before it is written."""
        try:
            return json.loads((self.dir / "phase.json").read_text())
        except FileNotFoundError:
            return None

    def wait_for_phase(self, step: int, name: str, timeout_s: float = 240) -> None:
        """Until phase.json says step `step`'s `name` (polled every 10 ms)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._note_daemons()
            found = self.phase()
            if found is not None and (found["step"], found["phase"]) == (step, name):
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"run ended before step {step}'s {name}:\n{self._ended()}")
            time.sleep(0.01)
        raise AssertionError(f"not in step {step}'s {name} within {timeout_s} s (phase.json: {self.phase()})")

    def actor_pids(self, role: str) -> list[int]:
        """The pids of the run's `role` actors ("trainer" or "engine"), from actors.json."""
        return [a["pid"] for a in json.loads((self.dir / "actors.json").read_text()) if a["role"] == role]

    def wait_for_stderr(self, text: str, timeout_s: float = 60) -> str:
        """Read the run's stderr as it comes until a line holds `text`; that line."""
        fd, deadline = self.proc.stderr.fileno(), time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [line for line in self._stderr_seen.splitlines() if text in line]
            if found:
                return found[0]
            if select.select([fd], [], [], 0.1)[0]:
                chunk = os.read(fd, 1 << 16)  # beside the pipe's text wrapper, whose buffer stays empty
                if not chunk:
                    break
                self._stderr_seen += chunk.decode(errors="replace")
        raise AssertionError(f"no {text!r} on stderr within {timeout_s} s:\n{self._stderr_seen[-3000:]}")

    def _ended(self) -> str:
        return (self._stderr_seen + self.proc.stderr.read())[-3000:]

    def finish(self, timeout_s: float = 600) -> tuple[int, str, str]:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._note_daemons()
            time.sleep(0.2)
        out, err = self.proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        return self.proc.returncode, out, self._stderr_seen + err

    def interrupt(self) -> None:
        """What Ctrl-C does to the driver."""
        self.proc.send_signal(signal.SIGINT)

    def leftover_daemons(self) -> list[str]:
        """Ray daemons of this run still alive (checked a few seconds after the driver exits)."""
        deadline = time.monotonic() + 10
        alive = []
        while time.monotonic() < deadline:
            alive = [f"{name} pid {pid}" for pid, name in self.daemons.items()
                     if psutil.pid_exists(pid) and psutil.Process(pid).name() == name
                     and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
            if not alive:
                return []
            time.sleep(0.5)
        return alive




def improvement(metrics: list[dict], key: str = "reward", window: int = 5) -> float:
    """Mean `key` of the last `window` steps that have it minus that of the first `window`: a
    step that generated no sample (async loop) has null there, not a 0 (driver/loop/step.py)."""
    values = [m[key] for m in metrics if m.get(key) is not None]
    first, last = values[:window], values[-window:]
    return sum(last) / len(last) - sum(first) / len(first)
