"""Trainer side of weight sync: the export as a stream of size-bounded buckets.

A merged GLM-5.3-Flash is ~599 GiB (docs/model.md section 4): sync must never hold it twice.
A trainer backend yields its HF-named tensors one at a time (`_weight_stream`: each one
gathered across model-parallel ranks and LoRA-merged on demand, on its device); here they
are copied to host and grouped into buckets of at most `max_bucket_bytes`, one bucket per
`next_bucket` call. So a rank holds the bucket it is building and nothing else; the driver
(launcher/driver/weight_sync.py) forwards each bucket to every engine before asking for the
one after next. Only rank 0's buckets carry tensors: the other ranks run the same
gathers in lockstep and drop what they gathered. With transport "cuda_ipc" (an hf engine
on rank 0's GPU, plan/sync.py bucket_transport) rank 0 packs each bucket into a device
buffer instead and ships its CUDA IPC handle (launcher/workers/ipc.py).

GPU engines (vLLM with CUDA IPC or NCCL) read the same stream, on the device, through
vLLM's transfer engines (`connect_weight_transfer` / `send_weights`).
"""
import collections
from collections.abc import Callable, Iterable, Iterator

import torch

from launcher.contract.protocols import BucketInfo, EngineWait, WeightBucket, WeightUpdate
from launcher.plan.sync import BUCKET_BYTES, CUDA_IPC, HOST, MAX_BUCKETS_ALIVE, transfer_buffer_bytes
from launcher.workers.ipc import PackedBucket


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


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


def buckets(named: Iterable[tuple[str, str, torch.Tensor]], max_bytes: int,
            packer: Callable[[], TensorList | PackedBucket] = TensorList) -> Iterator[WeightBucket]:
    """Group (kind, name, tensor) triples, in order, into buckets of one kind holding at most
    `max_bytes` (a tensor larger than that travels alone); the final one is marked `last`.
    `packer()` starts each bucket (TensorList, or ipc.PackedBucket: a device buffer)."""
    current, kind = None, ""
    for item_kind, name, tensor in named:
        if current is not None and (item_kind != kind or current.nbytes + nbytes(tensor) > max_bytes):
            yield current.bucket(kind, last=False)
            current = None
        if current is None:
            current = packer()
        kind = item_kind
        current.add(name, tensor)
    if current is not None:
        yield current.bucket(kind, last=True)


def _to_host(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor owning exactly its bytes: a view (gate|up halves of a fused weight)
    would pickle its whole storage into Ray's object store."""
    tensor = tensor.detach().to("cpu")
    if tensor.untyped_storage().nbytes() != nbytes(tensor):
        tensor = tensor.clone()
    return tensor


def _measured(tensor: torch.Tensor) -> torch.Tensor:
    """Ranks other than 0: keep the shape and dtype for the bucket boundaries, drop the data."""
    return torch.empty_like(tensor, device="meta")


def _on_device(tensor: torch.Tensor) -> torch.Tensor:
    """CUDA IPC transport: the tensor stays where it is; the bucket's packer copies it."""
    return tensor.detach()


class StreamedExport:
    """begin_export / next_bucket and the GPU transfer over a backend's weight stream.

    The backend sets `cfg`, `rank` and `device` (rank 0's, for CUDA IPC buckets) and implements
      _weight_stream(with_base) -> Iterator[(kind, HF name, tensor on its device)]
        ("weights" for full, merged or frozen-base tensors, "adapter" for LoRA tensors;
        a collective per tensor with model parallelism, the same order on every rank);
      _update_header(version, with_base) -> WeightUpdate.
    """

    _export: Iterator | None = None
    _sender = None
    _ipc_kept: collections.deque | None = None
    """CUDA IPC transport, rank 0: the device buffers of buckets an engine may still be reading."""

    def begin_export(self, version: int, with_base: bool, max_bucket_bytes: int,
                     transport: str = HOST) -> WeightUpdate:
        if transport not in (HOST, CUDA_IPC):
            raise ValueError(f"weight export transport={transport!r}: expected {HOST!r} or {CUDA_IPC!r} "
                             "(plan/sync.py bucket_transport)")
        self.release_export()
        packer, keep = TensorList, (_to_host if self.rank == 0 else _measured)
        if transport == CUDA_IPC and self.rank == 0:
            packer, keep = self._ipc_packer(max_bucket_bytes), _on_device
        named = ((kind, name, keep(t)) for kind, name, t in self._weight_stream(with_base))
        self._export = enumerate(buckets(named, max_bucket_bytes, packer))  # replaces (and so closes) an unfinished one
        return self._update_header(version, with_base)

    def _ipc_packer(self, max_bucket_bytes: int) -> Callable[[], PackedBucket]:
        if self.device.type != "cuda":
            raise ValueError(f"weight export transport={CUDA_IPC!r} needs trainer rank 0 on a CUDA device; it is "
                             f"on {self.device}: plan/sync.py bucket_transport picks it for GPU clusters only "
                             "(cluster.gpu.arch), so run on one or use a cluster with gpu.arch cpu")
        capacity = transfer_buffer_bytes(self.cfg, max_bucket_bytes)
        # The engine on this GPU assembles fused weights on the device as buckets land: hand it
        # the blocks this process's allocator keeps cached (training's activations, init's fp32).
        torch.cuda.empty_cache()
        self._ipc_kept = collections.deque()
        return lambda: PackedBucket(capacity, self.device, self._ipc_kept)

    def release_export(self) -> None:
        """The engines have loaded every bucket handed out: drop the kept device buffers and
        have torch free any an engine released late (its IPC limbo)."""
        if self._ipc_kept is not None:
            self._ipc_kept = None
            torch.cuda.ipc_collect()

    def next_bucket(self) -> tuple[BucketInfo | None, WeightBucket | None]:

        # The driver asks for this bucket only once every engine loaded all but the newest
        # MAX_BUCKETS_ALIVE - 1 buckets, so their buffers may go (torch's IPC refcount backs this up).
        while self._ipc_kept and len(self._ipc_kept) >= MAX_BUCKETS_ALIVE:
            self._ipc_kept.popleft()
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
        from launcher.workers.vllm.transfer import stream_source, trainer_sender  # the GPU transfer there is

        if self._update_header(0, False).adapter is not None:
            raise RuntimeError("GPU weight transfer ships merged weights; adapter sync goes through buckets")
        source = stream_source(lambda: ((name, t) for _, name, t in self._weight_stream(with_base=False)))
        self._sender = trainer_sender(self.cfg, engines, source, rank=self.rank, wait=wait,
                                      master_address=master_address, master_port=master_port)

    def send_weights(self, version: int, wait: EngineWait) -> None:
        if self._sender is None:
            raise RuntimeError("send_weights before connect_weight_transfer")
        self._sender.client.version, self._sender.client.wait = version, wait
        self._sender.send_weights()


def sync_in_process(trainer, engines: list, version: int, with_base: bool,
                    max_bucket_bytes: int = BUCKET_BYTES) -> list[BucketInfo]:
    """The driver's protocol without Ray (tests, notebooks): one trainer rank, engines in
    this process, one bucket alive at a time, host buckets (a process cannot open its own
    CUDA IPC handles). Returns what was sent."""
    update = trainer.begin_export(version, with_base, max_bucket_bytes)
    for engine in engines:
        engine.begin_weight_update(update)
    sent = []
    while True:
        info, bucket = trainer.next_bucket()
        if info is None:
            break
        for engine in engines:
            engine.load_weight_bucket(bucket)
        sent.append(info)
        del bucket
        if info.last:
            break
    for engine in engines:
        engine.finish_weight_update(version)
    return sent
