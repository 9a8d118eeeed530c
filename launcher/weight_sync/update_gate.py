"""Who uses an engine's model when weight updates arrive mid-generation
(`inference.update_mode: in_flight`).

The engine actor then runs two threads (Ray concurrency groups, driver/actors/engine_group.py): one
generates the in-flight chunks and offers the model at every token boundary; the other
runs the driver's ordered calls (weight updates, held-out evaluation) and takes the model
exclusively, at the next boundary, for as long as it needs it: a weight update from
begin_weight_update to finish_weight_update, an evaluation request to its end. The in-flight
sequences then continue, their KV cache kept, under whatever the holder left behind.

With update_mode between_chunks every call runs on the one thread, so `hold` never waits.
"""
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class UpdateGate:
    def __init__(self):
        self._cond = threading.Condition()
        self._decoding = False
        """An in-flight generation is inside a decode step (between two boundaries)."""
        self._held = False
        self._waiting = 0
        """Holders waiting for the next boundary: generation stops there for them."""
        self._failed: str | None = None
        """Why the holder failed (a weight update half-applied): waiting generation raises it."""

    def hold(self) -> None:
        """Take the model: wait until the in-flight generation (if any) reaches a token boundary."""
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._decoding and not self._held)
            self._waiting -= 1
            self._held = True

    def release(self) -> None:
        with self._cond:
            self._held, self._failed = False, None
            self._cond.notify_all()

    def fail(self, why: str) -> None:
        """The holder failed and keeps the model: generation waiting for it raises `why`
        (until a later holder's release) rather than waiting forever."""
        with self._cond:
            self._failed = why
            self._cond.notify_all()

    @contextmanager
    def holding(self) -> Iterator[None]:
        self.hold()
        try:
            yield
        finally:
            self.release()

    def _enter_decoding(self) -> None:
        self._cond.wait_for(lambda: self._failed or (not self._held and not self._waiting))
        if self._failed:
            raise RuntimeError(self._failed)
        self._decoding = True

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        """An in-flight generation: between its token boundaries (`boundary`) it owns the model."""
        with self._cond:
            self._enter_decoding()
        try:
            yield
        finally:
            with self._cond:
                self._decoding = False
                self._cond.notify_all()

    def boundary(self) -> None:
        """Called by the in-flight generation between two decode steps: a waiting holder
        (a weight update) takes the model here and generation resumes once it is released."""
        with self._cond:
            if not self._waiting and not self._held:
                return
            self._decoding = False
            self._cond.notify_all()
            self._enter_decoding()
