"""A transport: how weights travel from the trainer ranks to the engines, one plug-in per
plan.sync.transport (plan/sync.py SyncTransport), registered under its value in TRANSPORTS.

Each transport has three sides, all here so they cannot disagree:
- driver: `sync` pushes one policy version (the bucket pump of pump.py, or a GPU transfer);
- trainer rank 0 (bucket transports): `packing` builds each bucket as the export streams;
- engine (bucket transports): `open` turns a received bucket into (name, tensor) pairs.
"""
from abc import ABC, abstractmethod
from typing import ClassVar, Protocol

import torch

from launcher.plan.sync import SyncTransport
from launcher.registry import Registry
from launcher.weight_sync.messages import SyncStats, WeightBucket
from launcher.weight_sync.pump import stream_weights

Received = list[tuple[str, torch.Tensor]]
"""A bucket's (checkpoint or peft name, tensor) pairs, as the engine sees them."""


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


class BucketBuilder(Protocol):
    """One bucket being filled (host.TensorList, cuda_ipc.PackedBucket)."""

    nbytes: int

    def add(self, name: str, tensor: torch.Tensor) -> None: ...

    def bucket(self, kind: str, last: bool) -> WeightBucket: ...


class Packing(ABC):
    """Trainer side of one export by a bucket transport: how each bucket is built."""

    @abstractmethod
    def keep(self, tensor: torch.Tensor) -> torch.Tensor:
        """What of a streamed tensor goes into the bucket (a host copy, the device tensor, its shape)."""

    @abstractmethod
    def new_bucket(self) -> BucketBuilder:
        """An empty bucket."""

    def before_next(self) -> None:  # noqa: B027  (an optional hook: host buckets keep nothing)
        """The driver asks for another bucket: engines have loaded all but the newest few."""

    def release(self) -> None:  # noqa: B027  (an optional hook)
        """Every engine has loaded every bucket of the export: free what was kept for them."""


class Transport(ABC):
    kind: ClassVar[SyncTransport]

    @abstractmethod
    def sync(self, trainers, engines, version: int, with_base: bool, wait: bool,
             max_bucket_bytes: int) -> SyncStats:
        """Push policy `version` from the trainer group to the engine group (driver/actors/)."""


class BucketTransport(Transport):
    """Weights in size-bounded buckets that the driver forwards to every engine (pump.py)."""

    def sync(self, trainers, engines, version: int, with_base: bool, wait: bool,
             max_bucket_bytes: int) -> SyncStats:
        return stream_weights(trainers, engines, version, with_base, wait, max_bucket_bytes)

    @abstractmethod
    def packing(self, exporter, max_bucket_bytes: int) -> Packing:
        """Trainer rank 0's packing for one export (`exporter`: the StreamedExport, export.py)."""

    def open(self, bucket: WeightBucket, device: torch.device, who: str) -> tuple[Received, bool]:
        """The bucket's tensors, and whether they are mapped views of the trainer's buffer."""
        return bucket.tensors, False


TRANSPORTS: Registry[type[Transport]] = Registry("weight-sync transport")
"""SyncTransport value -> Transport class; each module of this package registers its own."""
