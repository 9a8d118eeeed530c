"""Trainer side of weight sync: the export as a stream of size-bounded buckets.

A merged GLM-5.3-Flash is ~599 GiB (docs/model.md section 4): sync must never hold it twice.
A trainer backend yields its HF-named tensors one at a time (`_weight_stream`: each one
gathered across model-parallel ranks and LoRA-merged on demand, on its device); here they
are grouped into buckets of at most `max_bucket_bytes`, one bucket per `next_bucket` call,
packed as the transport says (transports/: host copies, or a device buffer shipped by CUDA
IPC handle). So a rank holds the bucket it is building and nothing else; the driver
(pump.py) forwards each bucket to every engine before asking for the one after next. Only
rank 0's buckets carry tensors: the other ranks run the same gathers in lockstep and drop
what they gathered.

GPU vLLM engines read the same stream, on the device, through vLLM's transfer engines
(`connect_weight_transfer` / `send_weights`, transports/vllm_engine.py).
"""
from collections.abc import Iterable, Iterator

import torch

from launcher.plan.sync import SyncTransport
from launcher.weight_sync.messages import BucketInfo, EngineWait, WeightBucket, WeightUpdate
from launcher.weight_sync.transports import transport_for
from launcher.weight_sync.transports.base import BucketBuilder, BucketTransport, Packing, nbytes
from launcher.weight_sync.transports.host import HostPacking, Measured
from launcher.weight_sync.transports.vllm_engine import VllmTransfer, stream_source


def buckets(named: Iterable[tuple[str, str, torch.Tensor]], max_bytes: int,
            packing: Packing | None = None) -> Iterator[WeightBucket]:
    """Group (kind, name, tensor) triples, in order, into buckets of one kind holding at most
    `max_bytes` (a tensor larger than that travels alone); the final one is marked `last`.
    `packing.new_bucket()` starts each bucket (None: host tensor lists, or a device buffer)."""
    packing = packing or HostPacking()
    current: BucketBuilder | None = None
    kind = ""
    for item_kind, name, tensor in named:
        if current is not None and (item_kind != kind or current.nbytes + nbytes(tensor) > max_bytes):
            yield current.bucket(kind, last=False)
            current = None
        if current is None:
            current = packing.new_bucket()
        kind = item_kind
        current.add(name, tensor)
    if current is not None:
        yield current.bucket(kind, last=True)


class StreamedExport:
    """begin_export / next_bucket and the GPU transfer over a backend's weight stream.

    The backend sets `cfg`, `rank`, `device` (rank 0's, for CUDA IPC buckets) and
    `sync_transport` (plan.sync.transport) and implements
      _weight_stream(with_base) -> Iterator[(kind, HF name, tensor on its device)]
        ("weights" for full, merged or frozen-base tensors, "adapter" for LoRA tensors;
        a collective per tensor with model parallelism, the same order on every rank);
      _update_header(version, with_base) -> WeightUpdate.
    """

    _export: Iterator | None = None
    _packing: Packing | None = None
    _sender = None

    def begin_export(self, version: int, with_base: bool, max_bucket_bytes: int,
                     transport: SyncTransport = SyncTransport.host) -> WeightUpdate:
        """Start streaming this rank's weights for the engines (merged or full weights, or
        the adapter, preceded by its frozen base when `with_base`); returns the header.

        Nothing is materialised here: each `next_bucket` call gathers (model parallel:
        a collective, so every rank of the mesh calls both methods the same number of
        times), merges and packs only the tensors of one bucket of at most
        `max_bucket_bytes`, as the bucket transport `transport` packs them."""
        via = transport_for(transport)
        if not isinstance(via, BucketTransport):
            raise ValueError(f"weight export transport={via.kind.value!r}: not a bucket transport (its engines take "
                             "weights through connect_weight_transfer / send_weights)")
        self.release_export()
        packing = via.packing(self, max_bucket_bytes) if self.rank == 0 else Measured()
        named = ((kind, name, packing.keep(t)) for kind, name, t in self._weight_stream(with_base))
        self._export = enumerate(buckets(named, max_bucket_bytes, packing))  # replaces (and so closes) an unfinished one
        self._packing = packing
        return self._update_header(version, with_base)

    def release_export(self) -> None:
        """Every engine has loaded every bucket of the export: free what rank 0 still keeps
        for them (CUDA IPC's device buffers; nothing for host buckets)."""
        if self._packing is not None:
            self._packing.release()
            self._packing = None

    def next_bucket(self) -> tuple[BucketInfo | None, WeightBucket | None]:
        """(info, bucket) of the next bucket (info.last on the final one); (None, None) past
        the end. Ranks other than 0 return (info, None): they take part in the gathers only."""
        if self._packing is not None:
            self._packing.before_next()
        item = next(self._export, None) if self._export is not None else None
        if item is None:
            self._export = None
            return None, None
        index, bucket = item
        if bucket.last:
            self._export = None  # the stream is exhausted: every gather has run
        info = BucketInfo(index=index, kind=bucket.kind, tensors=bucket.count(), nbytes=bucket.nbytes,
                          last=bucket.last)
        return info, (bucket if self.rank == 0 else None)

    def connect_weight_transfer(self, engines: list, master_address: str, master_port: int, wait: EngineWait) -> None:
        """vLLM GPU engines only (plan.sync.transport vllm_ipc / vllm_nccl): build the trainer
        side of that transfer with the engine actors. Called on every rank. Each wait on the
        engines is bounded by `wait` (PeerLostError naming the engine)."""
        via = transport_for(self.sync_transport)
        if not isinstance(via, VllmTransfer):
            raise RuntimeError(f"connect_weight_transfer with plan.sync.transport={via.kind.value!r}: only vLLM's "
                               "transfer engines are connected; buckets go through begin_export")
        if self._update_header(0, False).adapter is not None:
            raise RuntimeError("GPU weight transfer ships merged weights; adapter sync goes through buckets")
        source = stream_source(lambda: ((name, t) for _, name, t in self._weight_stream(with_base=False)))
        self._sender = via.trainer_sender(self.cfg, engines, source, rank=self.rank, wait=wait,
                                          master_address=master_address, master_port=master_port)

    def send_weights(self, version: int, wait: EngineWait) -> None:
        """vLLM GPU engines only: push merged weights straight to the engines (rank 0 drives
        them; every rank joins the gathers), each wait on them bounded by `wait`. Returns
        once the engines serve `version`."""
        if self._sender is None:
            raise RuntimeError("send_weights before connect_weight_transfer")
        self._sender.client.version, self._sender.client.wait = version, wait
        self._sender.send_weights()
