"""Stopping a run on a preemption signal (run.preemption_signals) and losing at most the
step in flight.

Slurm and Kubernetes send SIGTERM, then SIGKILL a grace period later; `sbatch --signal`
sends SIGUSR1 ahead of a time limit. Ending at once, as on Ctrl-C, would lose every step
since the last periodic checkpoint. On the first signal instead:

1. The step in flight goes on. While its trainers have not started on it (generation, the
   colocated swap, the next step's evaluation) it is *droppable*: when the step deadline
   (the grace less the checkpoint write and Ray's stop, launcher/plan/preemption.py) passes,
   StepDropped is raised there, and the step's data position is given back, so the resumed
   run draws the same prompts. The deadline is a timer thread that sends the same signal to
   the main thread (only a signal interrupts the driver's blocking waits on Ray; SIGALRM is
   the reward calls' time limit, launcher/rl/_deadline.py). Once the trainers work on it,
   it finishes: half a step's optimizer updates could be saved as no step at all.
2. The loop stops at the next step boundary; the driver completes a background checkpoint
   write, writes the last completed step's when the newest complete checkpoint is older,
   and exits 128 + the signal's number after Ray stops (launcher/driver/launch.py).

A second signal, or a first one before the loop runs (start-up: nothing to save yet),
raises StopNow (a KeyboardInterrupt) wherever the driver is: it skips to the clean-up.
"""
import contextlib
import shlex
import signal
import sys
import threading
import time

from launcher.driver.records.phase import RunPhase


class StopNow(KeyboardInterrupt):
    """Skip to the clean-up: a second preemption signal, or one before the loop runs."""

    def __init__(self, signum: int):
        super().__init__(f"{signal.Signals(signum).name} received")
        self.signum = signum


class Preempted(Exception):
    """The loop stopped on a preemption signal and the driver saved what it could; raised
    inside the Ray session so that Ray stops before the report (launch.py)."""

    def __init__(self, signum: int, step: int, checkpoint, saved: bool):
        super().__init__(f"{signal.Signals(signum).name} received")
        self.signum, self.step, self.checkpoint, self.saved = signum, step, checkpoint, saved


class StepDropped(BaseException):
    """The step deadline passed while the step in flight was droppable (its trainers had not
    started on it). A BaseException, so no `except Exception` in between swallows it."""


def _seconds(value_s: float) -> str:
    """Whole seconds, tenths below 10 s (a 0.5 s step budget is not `0 s`)."""
    return f"{value_s:.0f}" if value_s >= 10 else f"{value_s:.1f}"


def _say(message: str) -> None:
    sys.stderr.write(f"preemption: {message}\n")
    sys.stderr.flush()


class Preemption:
    """One run's preemption state: which signal came, and the step deadline it set."""

    def __init__(self, signals: list[int], grace_s: float, save_s: float, basis: str, phase: RunPhase | None = None):
        """phase: the run's (phase.py), named in the first signal's message; in memory only when not given."""
        self.signals, self.grace_s, self.basis = list(signals), grace_s, basis
        self.phase = phase or RunPhase(None)
        self.step_budget_s = max(grace_s - save_s, 0.0)
        """Of the grace, what the step in flight may take (the rest: the save and Ray's stop)."""
        self.signum: int | None = None
        self.received: float | None = None
        self.running = False
        """Set once the loop runs: before, a signal skips to the clean-up at once."""
        self._droppable = False
        self._timer: threading.Timer | None = None
        self._deadline_sent = False
        """The next signal is the step deadline's own (sent by _timer), not a second one."""

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def overdue(self) -> bool:
        return self.received is not None and time.monotonic() - self.received >= self.step_budget_s

    def left_s(self) -> float:
        """Seconds of the step budget left (the whole budget before any signal)."""
        if self.received is None:
            return self.step_budget_s
        return self.step_budget_s - (time.monotonic() - self.received)

    @contextlib.contextmanager
    def installed(self):
        """This run's handlers for its signals; the previous ones back on the way out."""
        previous = {s: signal.signal(s, self._on_signal) for s in self.signals}
        if signal.SIGTERM not in self.signals:  # left out of run.preemption_signals: it stops at once
            previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._stop_now)
        try:
            yield self
        finally:
            if self._timer is not None:
                self._timer.cancel()
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _stop_now(self, signum, frame) -> None:
        self.signum = self.signum or signum
        raise StopNow(signum)

    def _on_signal(self, signum, frame) -> None:
        if self._deadline_sent:
            self._deadline_sent = False
            if self._droppable:
                raise StepDropped()
            _say("the step deadline passed while the trainers work on the step in flight: it finishes first "
                 "(a second signal stops at once)")
            return
        if self.requested or not self.running:
            self._stop_now(signum, frame)
        self.signum, self.received = signum, time.monotonic()
        self._timer = threading.Timer(self.step_budget_s, self._send_deadline)
        self._timer.daemon = True
        self._timer.start()
        _say(f"{signal.Signals(signum).name} received in {self.phase.describe()}: the step in flight finishes, or is "
             f"dropped in {_seconds(self.step_budget_s)} s while its trainers have not started on it; then the last "
             f"completed step is saved and Ray stops (grace {_seconds(self.grace_s)} s: {self.basis}). A second signal "
             "stops at once, saving nothing more")

    def _send_deadline(self) -> None:
        """On the timer's thread: the step deadline, as the received signal sent to the main thread."""
        self._deadline_sent = True
        signal.pthread_kill(threading.main_thread().ident, self.signum)

    @contextlib.contextmanager
    def droppable(self):
        """Around the part of a step before its trainers start on it: dropped (StepDropped) when
        the step deadline passes inside it, or had passed on entry."""
        if self.requested and self.overdue():
            raise StepDropped()
        self._droppable = True
        try:
            yield
        finally:
            self._droppable = False

    def may_start(self, estimate_s: float) -> bool:
        """Whether the trainers may start on the step in flight: no signal, or the step budget's
        remainder holds the plan's estimate of what is left of it."""
        return not self.requested or self.left_s() >= estimate_s


def make_preemption(config, plan, phase: RunPhase | None = None) -> Preemption:
    """The run's Preemption from run.preemption_signals and run.preemption_grace_s (or its default)."""
    from launcher.plan.preemption import grace_s, save_s

    grace, basis = grace_s(config, plan)
    return Preemption([signal.Signals[s.value] for s in config.run.preemption_signals], grace,
                      save_s(config, plan), basis, phase)


def resume_command(composed) -> str:
    """The command that continues this run from its newest checkpoint."""
    kept = [o for o in composed.overrides if o.partition("=")[0].lstrip("+~") != "run.resume"]
    return shlex.join([sys.executable, "-m", "launcher", "run", *kept, "run.resume=auto"])


def stopped_report(stop: Preempted, composed, preemption: Preemption) -> str:
    """What a preempted run saved, how long the stop took, and the command that resumes it."""
    took = f"{_seconds(time.monotonic() - preemption.received)} s after it (grace {_seconds(preemption.grace_s)} s)"
    if stop.checkpoint is None:
        saved = "no checkpoint (no step completed)"
    elif stop.saved:
        saved = f"saved step {stop.step} as {stop.checkpoint}"
    else:
        saved = f"step {stop.step} was saved already: {stop.checkpoint}"
    return (f"stopped on {signal.Signals(stop.signum).name}, {took}: {saved}; Ray stopped.\n"
            f"resume with: {resume_command(composed)}\n")
