"""End-to-end run helpers: `python -m launcher` in a subprocess on the embedded Ray."""
import json
import os
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
                raise AssertionError(f"run ended before step {step}:\n{self.proc.stderr.read()[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"no step {step} within {timeout_s} s")

    def finish(self, timeout_s: float = 600) -> tuple[int, str, str]:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._note_daemons()
            time.sleep(0.2)
        out, err = self.proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        return self.proc.returncode, out, err

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
    first = [m[key] for m in metrics[:window]]
    last = [m[key] for m in metrics[-window:]]
    return sum(last) / len(last) - sum(first) / len(first)
