"""The weight-update state machine every inference engine shares (hf, vLLM), written once.

An update is a WeightUpdate header (begin), its buckets (load), then finish: "adapter"
buckets are kept until finish and applied there as one LoRA; "weights" buckets (full or
merged weights, or an adapter's frozen base) go to the backend as they arrive, and the
backend checks them against its sync manifest (manifest.py) at finish. Generating between
begin and finish is an error, and so is an adapter alone after a level-2 sleep dropped the
base it sits on. A backend supplies only its own steps, the `_hook` methods below.

ServedWeights is the bookkeeping of what an engine serves (version, frozen base, whether
it holds weights now), kept by whichever object loads the weights: the hf engine itself,
or the vLLM engine its actor drives (whose GPU transfers bypass the bucket stream).
"""
import os
from abc import ABC, abstractmethod

import torch

from launcher.contract.base_identity import checkpoint_base
from launcher.contract.protocols import WeightBucket, WeightUpdate
from launcher.contract.spec import ActorSpec
from launcher.workers.progress import Progress

Received = list[tuple[str, torch.Tensor]]
"""A bucket's (checkpoint or peft name, tensor) pairs, as the engine sees them."""


def ships_weights(update: WeightUpdate) -> bool:
    """Whether model weights (not only an adapter) arrive in `update`: full or merged weights,
    or an adapter's frozen base (with_base)."""
    return update.adapter is None or update.with_base


class ServedWeights:
    def __init__(self, hf_path: str | None):
        self.version = 0
        """Policy version of the weights served; each generation reports it."""
        self.checkpoint = checkpoint_base(hf_path)
        """The folder the weights were loaded from ({"hf_path", "sha256"}); None: random init."""
        self.has_weights = True
        """False after a level-2 sleep until weights (full, merged or an adapter's base) arrive."""

    def loaded_base(self) -> dict | None:
        """The checkpoint whose weights the engine serves, while it holds them (not after a
        level-2 sleep): the driver then skips pushing the same frozen base (weight_sync.py)."""
        return self.checkpoint if self.has_weights else None


class EngineBase(ABC):
    def __init__(self, backend: str, spec: ActorSpec):
        self.index = spec.rank
        self.who = f"{backend} engine {spec.rank}"
        """How errors name this engine ("hf engine 0"), as its sync manifest does."""
        self.progress = Progress(spec.board, f"engine {spec.rank}")
        """Start-up phases for the driver's board (progress.py); named as the driver's EngineGroup labels it."""
        self._update: WeightUpdate | None = None
        """The update between begin and finish (None otherwise)."""
        self._adapter_tensors: dict[str, torch.Tensor] = {}

    def pid(self) -> int:
        return os.getpid()

    def weight_transfer(self) -> str | None:
        """None: weights arrive in buckets only (a backend with a GPU transfer names it)."""
        return None

    def _refuse_mid_update(self) -> None:
        """Called by generate: no request may run on a half-applied update."""
        if self._update is not None:
            raise RuntimeError(f"{self.who} was asked to generate in the middle of weight update "
                               f"{self._update.version} (begin without finish)")

    def begin_weight_update(self, update: WeightUpdate) -> None:
        if not ships_weights(update) and not self._holds_weights():
            raise RuntimeError(f"{self.who} dropped its weights (sleep level 2) and got only an adapter; send the "
                               "base with it (begin_export(with_base=True))")
        if ships_weights(update):
            self._begin_weights()
        self._update, self._adapter_tensors = update, {}

    def load_weight_bucket(self, bucket: WeightBucket) -> int:
        if self._update is None:
            raise RuntimeError(f"{self.who} got a weight bucket outside an update")
        if bucket.kind != "adapter" and not ships_weights(self._update):
            raise RuntimeError(f"{self.who} got a weights bucket in adapter-only update {self._update.version} "
                               "(with_base=False): the base would load unchecked")
        received, mapped = self._open(bucket)
        if bucket.kind == "adapter":
            # A mapped tensor is a view of the trainer's buffer, freed once this call returns.
            self._adapter_tensors.update((n, t.clone() if mapped else t) for n, t in received)
        else:
            self._load_weights(received, mapped)
        return len(received)

    def finish_weight_update(self, version: int) -> None:
        update, adapter_tensors = self._update, self._adapter_tensors
        self._update, self._adapter_tensors = None, {}
        if update is None:
            raise RuntimeError(f"{self.who}: finish_weight_update without begin")
        if ships_weights(update):
            self._finish_weights(version)
        if update.adapter is not None:
            self._apply_adapter(update.adapter, adapter_tensors, version)

    # ---- hooks: the backend's own steps -----------------------------------------------------

    @abstractmethod
    def _holds_weights(self) -> bool:
        """Whether the model's weights are in memory (False after a level-2 sleep)."""

    def _open(self, bucket: WeightBucket) -> tuple[Received, bool]:
        """The bucket's tensors, and whether they are mapped views (CUDA IPC) of the trainer's buffer."""
        return bucket.tensors, False

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
