"""Engine side of weight sync: the update state machine every engine shares (hf, vLLM), written once.

An update is a WeightUpdate header (begin), its buckets (load), then finish: each bucket is
opened by the transport that packed it (transports/: host tensors, or views of trainer rank
0's CUDA IPC buffer); "adapter" buckets are kept until finish and applied there as one LoRA;
"weights" buckets (full or merged weights, or an adapter's frozen base) go to the backend as
they arrive, and the backend checks them against its sync manifest (manifest.py) at finish.
Generating between begin and finish is an error, and so is an adapter alone after a level-2
sleep dropped the base it sits on. A backend supplies only its own steps, the `_hook`
methods below (launcher/workers/engine_base.py adds what an engine is beside its updates).

ServedWeights is the bookkeeping of what an engine serves (version, frozen base, whether
it holds weights now), kept by whichever object loads the weights: the hf engine itself,
or the vLLM engine its actor drives (whose GPU transfers bypass the bucket stream).
"""
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from launcher.weight_sync.base_identity import folder_base
from launcher.weight_sync.messages import WeightBucket, WeightUpdate
from launcher.weight_sync.transports import transport_for
from launcher.weight_sync.transports.base import BucketTransport, Received
from launcher.weight_sync.update_gate import UpdateGate


def ships_weights(update: WeightUpdate) -> bool:
    """Whether model weights (not only an adapter) arrive in `update`: full or merged weights,
    or an adapter's frozen base (with_base)."""
    return update.adapter is None or update.with_base


class ServedWeights:
    def __init__(self, hf_path: str | None):
        self.version = 0
        """Policy version of the weights served; each generation reports it."""
        self.folder = folder_base(hf_path)
        """The folder the weights were loaded from ({"hf_path", "sha256"}); None: random init."""
        self.has_weights = True
        """False after a level-2 sleep until weights (full, merged or an adapter's base) arrive."""

    def loaded_base(self) -> dict | None:
        """The model folder whose weights the engine serves now ({"hf_path", "sha256"},
        base_identity.folder_base), None for a random init or after a level-2 sleep: the
        driver then skips pushing the same frozen base (pump.engines_hold_base)."""
        return self.folder if self.has_weights else None


class WeightReceiver(ABC):
    device: torch.device = torch.device("cpu")
    """Where the engine's weights live: a CUDA IPC bucket is mapped on this device (the hf engine sets it)."""

    def __init__(self, who: str):
        self.who = who
        """How errors name this engine ("hf engine 0"), as its sync manifest does."""
        self._update: WeightUpdate | None = None
        """The update between begin and finish (None otherwise)."""
        self._adapter_tensors: dict[str, torch.Tensor] = {}
        self.gate = UpdateGate()
        """Held from begin to finish: an in-flight generation (inference.update_mode: in_flight)
        pauses at its next token boundary for the update and continues on the new weights."""

    def _refuse_mid_update(self) -> None:
        """Called by generate: no request may run on a half-applied update."""
        if self._update is not None:
            raise RuntimeError(f"{self.who} was asked to generate in the middle of weight update "
                               f"{self._update.version} (begin without finish)")

    def begin_weight_update(self, update: WeightUpdate) -> None:
        """A streamed update starts: buckets follow, then finish_weight_update. It waits
        for the model: between generate calls, or at a token boundary of an in-flight one
        (update_gate.py); nothing generates until finish. After a failed update (begin
        without finish) the gate is still held from it."""
        if not ships_weights(update) and not self._holds_weights():
            raise RuntimeError(f"{self.who} dropped its weights (sleep level 2) and got only an adapter; send the "
                               "base with it (begin_export(with_base=True))")
        if self._update is None:
            self.gate.hold()
        self._update, self._adapter_tensors = update, {}
        if ships_weights(update):
            with self._stops_generation_on_failure():
                self._begin_weights()

    def load_weight_bucket(self, bucket: WeightBucket) -> int:
        """Load (or, for adapter buckets, keep) one bucket and release it; returns its tensor count."""
        if self._update is None:
            raise RuntimeError(f"{self.who} got a weight bucket outside an update")
        if bucket.kind != "adapter" and not ships_weights(self._update):
            raise RuntimeError(f"{self.who} got a weights bucket in adapter-only update {self._update.version} "
                               "(with_base=False): the base would load unchecked")
        with self._stops_generation_on_failure():
            received, mapped = self._open(bucket)
            if bucket.kind == "adapter":
                # A mapped tensor is a view of the trainer's buffer, freed once this call returns.
                self._adapter_tensors.update((n, t.clone() if mapped else t) for n, t in received)
            else:
                self._load_weights(received, mapped)
        return len(received)

    def finish_weight_update(self, version: int) -> None:
        """Every bucket has arrived: serve the new weights as `version` from the next generate."""
        update, adapter_tensors = self._update, self._adapter_tensors
        if update is None:
            raise RuntimeError(f"{self.who}: finish_weight_update without begin")
        with self._stops_generation_on_failure():
            if ships_weights(update):
                self._finish_weights(version)
            if update.adapter is not None:
                self._apply_adapter(update.adapter, adapter_tensors, version)
        self._update, self._adapter_tensors = None, {}
        self.gate.release()

    @contextmanager
    def _stops_generation_on_failure(self) -> Iterator[None]:
        """A failed step leaves the update half-applied and the gate held: a generation paused
        for it (in flight) would wait forever, so it is told to fail instead (update_gate.py)."""
        try:
            yield
        except Exception as err:
            self.gate.fail(f"{self.who}: weight update {self._update.version} failed ({type(err).__name__}: "
                           f"{err}), so the chunk it paused cannot go on on half-loaded weights")
            raise

    # ---- hooks: the backend's own steps -----------------------------------------------------

    @abstractmethod
    def _holds_weights(self) -> bool:
        """Whether the model's weights are in memory (False after a level-2 sleep)."""

    def _open(self, bucket: WeightBucket) -> tuple[Received, bool]:
        """The bucket's tensors, and whether they are mapped views (CUDA IPC) of the trainer's buffer."""
        via = transport_for(bucket.transport)
        if not isinstance(via, BucketTransport):
            raise RuntimeError(f"{self.who} got a bucket of transport {bucket.transport!r}, which sends no buckets")
        return via.open(bucket, self.device, self.who)

    @abstractmethod
    def _begin_weights(self) -> None:
        """Weights follow: make room for them (a new manifest, memory back after a sleep)."""

    @abstractmethod
    def _load_weights(self, received: Received, mapped: bool) -> None:
        """Record one "weights" bucket in the manifest and load what the model has."""

    @abstractmethod
    def _finish_weights(self, version: int) -> None:
        """Every weights bucket is in: check the manifest and serve them as `version`."""

    @abstractmethod
    def _apply_adapter(self, adapter: dict, tensors: dict[str, torch.Tensor], version: int) -> None:
        """Serve the LoRA (`adapter`: peft LoraConfig kwargs; `tensors`: its weights) as `version`."""
