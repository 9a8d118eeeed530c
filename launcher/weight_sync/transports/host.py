"""Host buckets: trainer rank 0 copies each tensor to host memory, the buckets travel through
Ray's object store, and the engine loads them onto its device (~1 GiB/s on H200s, plan/sync.py
HOST_STAGED_GIB_PER_S). The transport of CPU runs, async hf engines and every adapter sync.

`Measured` is what every rank but 0 packs, whatever the transport: the shapes and dtypes that
set the bucket boundaries, with no data (those ranks only take part in the gathers).
"""
import torch

from launcher.plan.sync import SyncTransport
from launcher.weight_sync.messages import WeightBucket
from launcher.weight_sync.transports.base import TRANSPORTS, BucketTransport, Packing, nbytes


class TensorList:
    """A bucket as its (name, tensor) pairs (host tensors on rank 0, meta ones elsewhere)."""

    def __init__(self):
        self.tensors: list[tuple[str, torch.Tensor]] = []
        self.nbytes = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        self.tensors.append((name, tensor))
        self.nbytes += nbytes(tensor)

    def bucket(self, kind: str, last: bool) -> WeightBucket:
        return WeightBucket(kind, self.tensors, self.nbytes, last=last)


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor owning exactly its bytes: a view (gate|up halves of a fused weight)
    would pickle its whole storage into Ray's object store."""
    tensor = tensor.detach().to("cpu")
    if tensor.untyped_storage().nbytes() != nbytes(tensor):
        tensor = tensor.clone()
    return tensor


def measured(tensor: torch.Tensor) -> torch.Tensor:
    """Ranks other than 0: keep the shape and dtype for the bucket boundaries, drop the data."""
    return torch.empty_like(tensor, device="meta")


class HostPacking(Packing):
    def keep(self, tensor: torch.Tensor) -> torch.Tensor:
        return to_host(tensor)

    def new_bucket(self) -> TensorList:
        return TensorList()


class Measured(HostPacking):
    def keep(self, tensor: torch.Tensor) -> torch.Tensor:
        return measured(tensor)


@TRANSPORTS.register(SyncTransport.host)
class HostBuckets(BucketTransport):
    kind = SyncTransport.host

    def packing(self, exporter, max_bucket_bytes: int) -> Packing:
        return HostPacking()
