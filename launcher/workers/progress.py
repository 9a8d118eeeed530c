"""Start-up progress: which phase an actor is in while its constructor and first calls run.

A Ray actor answers no call while its constructor runs (a model build or a checkpoint read:
minutes at real width), so the driver cannot ask it. Instead each actor tells the run's
start-up board (launcher/driver/actors/startup.py, an actor of its own, handed over in the
ActorSpec) every phase it enters, without waiting for an answer. The driver prints the
board while it waits, writes the seconds per phase into metrics.jsonl, and a start-up
deadline overrun names the phase the late actor was in.
"""
import time


class Progress:
    def __init__(self, board, who: str):
        """board: the StartupBoard's actor handle, or None (an actor built outside a run)."""
        self.board, self.who = board, who

    def phase(self, name: str, detail: str = "") -> None:
        """Enter phase `name` (`detail`: e.g. bytes read so far; the same name with a new
        detail updates the line without restarting the phase's clock)."""
        if self.board is not None:
            self.board.report.remote(self.who, name, detail)

    def bytes_reporter(self, name: str, every_s: float = 1.0):
        """on_progress(done, total) for a loader: phase `name` with "12.1 of 44.3 GiB, 2.3 GB/s",
        reported at most every `every_s` seconds and once at the end."""
        started, last = time.monotonic(), [0.0]

        def report(done: int, total: int) -> None:
            now = time.monotonic()
            if now - last[0] < every_s and done < total:
                return
            last[0] = now
            rate = done / max(now - started, 1e-9) / 1e9
            self.phase(name, f"{done / 2**30:.1f} of {total / 2**30:.1f} GiB, {rate:.1f} GB/s")

        return report
