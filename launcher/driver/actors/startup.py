"""The start-up board: each actor's phase while the run comes up, shown live and recorded.

Actors report phases to the board (launcher/workers/progress.py) as they enter them; the
board, a Ray actor of its own that answers at once, times them on its own clock (actors on
other nodes need no synchronized clocks). While the driver waits on a start-up call it
prints one line per group (rewritten in place on a terminal, a plain line per change in a
log or a Ray job); after the first sync metrics.jsonl gets a `startup` row with the
seconds per phase per actor, and a start-up deadline overrun says which phase each late
actor was in.
"""
import re
import sys
import time

import ray

POLL_S = 2.0
"""How often the driver redraws the board while it waits on a start-up call."""
FINAL_WAIT_S = 30.0
"""How long the start-up row and a deadline's error wait for the board's last snapshot."""
PLAIN_REPEAT_S = 30.0
"""Without a terminal, an unchanged line is printed again after this long (a heartbeat in logs)."""


class Board:
    """The board's state (StartupBoard is this class as a Ray actor)."""

    def __init__(self):
        self.phases: dict[str, list[list]] = {}
        """actor -> [[phase, detail, started (monotonic s)], ...] in the order entered."""

    def report(self, who: str, phase: str, detail: str = "") -> None:
        entries = self.phases.setdefault(who, [])
        if entries and entries[-1][0] == phase:
            entries[-1][1] = detail
        else:
            entries.append([phase, detail, time.monotonic()])

    def snapshot(self) -> dict[str, dict]:
        """actor -> {"phase", "detail", "in_phase_s", "seconds": {phase: s}}; the open phase counts to now."""
        now, out = time.monotonic(), {}
        for who, entries in self.phases.items():
            ends = [e[2] for e in entries[1:]] + [now]
            seconds: dict[str, float] = {}
            for (phase, _, began), end in zip(entries, ends, strict=True):
                seconds[phase] = round(seconds.get(phase, 0.0) + end - began, 2)
            phase, detail, began = entries[-1]
            out[who] = {"phase": phase, "detail": detail, "in_phase_s": now - began, "seconds": seconds}
        return out


StartupBoard = ray.remote(num_cpus=0)(Board)


def group_line(role: str, snapshot: dict[str, dict], labels: list[str]) -> str:
    """`engines: engine 0 reading checkpoint (12.1 of 44.3 GiB, 2.3 GB/s) 14 s`; actors not yet
    heard from are `placed`."""
    parts = []
    for label in labels:
        state = snapshot.get(label)
        if state is None:
            parts.append(f"{label} placed")
            continue
        detail = f" ({state['detail']})" if state["detail"] else ""
        parts.append(f"{label} {state['phase']}{detail} {state['in_phase_s']:.0f} s")
    return f"start-up {role}: " + ", ".join(parts)


class StartupView:
    """Draws the board for the driver while it waits (StartupView.poll) and answers which
    phase a late actor was in (phase_of)."""

    def __init__(self, board, stream=None):
        self.board, self.stream = board, stream or sys.stdout
        self.live = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.groups: list[tuple[str, list[str]]] = []
        self._printed: dict[str, tuple[str, float]] = {}
        """role -> (line without its seconds, when printed): plain mode prints changes and heartbeats."""
        self.snapshot: dict[str, dict] = {}
        self._asked = None
        """The board's snapshot asked for and not yet read (the board's own process may still be starting)."""

    def add_group(self, role: str, labels: list[str]) -> None:
        self.groups.append((role, labels))

    def refresh(self, wait_s: float = 0.0) -> dict[str, dict]:
        """The board's latest snapshot if it answers within wait_s, else the one before: the
        driver never blocks on the board."""
        if self._asked is None:
            self._asked = self.board.snapshot.remote()
        ready, _ = ray.wait([self._asked], timeout=wait_s)
        if ready:
            self.snapshot, self._asked = ray.get(ready[0]), None
        return self.snapshot

    def poll(self) -> None:
        self.refresh()
        lines = {role: group_line(role, self.snapshot, labels) for role, labels in self.groups}
        if self.live:
            self.stream.write("\r\x1b[2K" + " | ".join(lines.values())[:400])
        else:
            now = time.monotonic()
            for role, line in lines.items():
                steady = _without_seconds(line)
                last, at = self._printed.get(role, ("", 0.0))
                if steady != last or now - at >= PLAIN_REPEAT_S:
                    self.stream.write(line + "\n")
                    self._printed[role] = (steady, now)
        self.stream.flush()

    def end_live_line(self) -> None:
        if self.live:
            self.stream.write("\n")
            self.stream.flush()

    def phase_of(self, who_label: str) -> str:
        """`in phase 'reading checkpoint' for 312 s` for an actor's label, from the last snapshot."""
        state = self.snapshot.get(who_label)
        if state is None:
            return "before it reported any phase (placed, constructor not yet running)"
        detail = f" ({state['detail']})" if state["detail"] else ""
        return f"in phase '{state['phase']}'{detail} for {state['in_phase_s']:.0f} s"

    def seconds(self) -> dict[str, dict[str, float]]:
        """actor -> {phase: seconds}, for metrics.jsonl's start-up row."""
        self.refresh(wait_s=FINAL_WAIT_S)  # one asked for earlier, if any: then a fresh one, after every report
        return {who: state["seconds"] for who, state in self.refresh(wait_s=FINAL_WAIT_S).items()}


def _without_seconds(line: str) -> str:
    return re.sub(r" \d+ s\b", "", line)


class Startup:
    """One run's start-up: the board, its view, and the driver's own phases (who "driver")."""

    def __init__(self, stream=None):
        self.board = StartupBoard.remote()
        self.view = StartupView(self.board, stream)
        self.groups: list = []

    def driver_phase(self, phase: str) -> None:
        self.board.report.remote("driver", phase)

    def attach(self, group) -> None:
        """Draw `group` (a TrainerGroup or EngineGroup, driver/actors/) on the board while its calls
        are waited on."""
        group.view = self.view
        self.groups.append(group)
        self.view.add_group(group.role + "s", group.labels)

    def finish(self) -> dict[str, dict[str, float]]:
        """Stop drawing; actor -> {phase: seconds} (the driver's included) for the start-up row."""
        self.driver_phase("running")
        seconds = self.view.seconds()
        for group in self.groups:
            group.view = None
        self.view.end_live_line()
        for phases in seconds.values():
            phases.pop("running", None)
            phases.pop("ready", None)
        return seconds
