"""Trainer side of weight sync: the export as a stream of size-bounded buckets.

A merged GLM-5.3-Flash is ~599 GiB (DOMAIN.md section 4): sync must never hold it twice.
A trainer backend yields its HF-named tensors one at a time (`_weight_stream`: each one
gathered across model-parallel ranks and LoRA-merged on demand, on its device); here they
are copied to host and grouped into buckets of at most `max_bucket_bytes`, one bucket per
`next_bucket` call. So a rank holds the bucket it is building and nothing else; the driver
(launcher/rl/weight_sync.py) forwards each bucket to every engine before asking for the
one after next. Only rank 0's buckets carry tensors: the other ranks run the same
gathers in lockstep and drop what they gathered.

GPU engines (vLLM with CUDA IPC or NCCL) read the same stream, on the device, through
vLLM's transfer engines (`connect_weight_transfer` / `send_weights`).
"""
from collections.abc import Iterable, Iterator

import torch

from launcher.backends.protocols import BucketInfo, WeightBucket, WeightUpdate
from launcher.plan.sync import SYNC_BUCKET_GIB

BUCKET_BYTES = int(SYNC_BUCKET_GIB * 2**30)
"""The planner's bucket (plan/sync.py prices one overhead per bucket), so the plan's sync
time is that of what runs. Per bucket an engine takes one actor call and one load_weights
call, small next to moving 1 GiB; two buckets in flight fit in host RAM beside the rest."""


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def buckets(named: Iterable[tuple[str, str, torch.Tensor]], max_bytes: int) -> Iterator[WeightBucket]:
    """Group (kind, name, tensor) triples, in order, into buckets of one kind holding at most
    `max_bytes` (a tensor larger than that travels alone); the final one is marked `last`."""
    tensors: list[tuple[str, torch.Tensor]] = []
    kind, size = "", 0
    for item_kind, name, tensor in named:
        n = nbytes(tensor)
        if tensors and (item_kind != kind or size + n > max_bytes):
            yield WeightBucket(kind, tensors, size)
            tensors, size = [], 0
        kind = item_kind
        tensors.append((name, tensor))
        size += n
    if tensors:
        yield WeightBucket(kind, tensors, size, last=True)


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


class StreamedExport:
    """begin_export / next_bucket and the GPU transfer over a backend's weight stream.

    The backend sets `cfg` and `rank` and implements
      _weight_stream(with_base) -> Iterator[(kind, HF name, tensor on its device)]
        ("weights" for full, merged or frozen-base tensors, "adapter" for LoRA tensors;
        a collective per tensor with model parallelism, the same order on every rank);
      _update_header(version, with_base) -> WeightUpdate.
    """

    _export: Iterator | None = None
    _sender = None

    def begin_export(self, version: int, with_base: bool, max_bucket_bytes: int) -> WeightUpdate:
        keep = _to_host if self.rank == 0 else _measured
        named = ((kind, name, keep(t)) for kind, name, t in self._weight_stream(with_base))
        self._export = enumerate(buckets(named, max_bucket_bytes))  # replaces (and so closes) an unfinished one
        return self._update_header(version, with_base)

    def next_bucket(self) -> tuple[BucketInfo | None, WeightBucket | None]:
        item = next(self._export, None) if self._export is not None else None
        if item is None:
            self._export = None
            return None, None
        index, bucket = item
        if bucket.last:
            self._export = None  # the stream is exhausted: every gather has run
        info = BucketInfo(index=index, kind=bucket.kind, tensors=len(bucket.tensors), nbytes=bucket.nbytes,
                          last=bucket.last)
        return info, (bucket if self.rank == 0 else None)

    def connect_weight_transfer(self, engines: list, master_address: str, master_port: int) -> None:
        from launcher.backends.vllm._transfer import stream_source, trainer_sender  # the GPU transfer there is

        if self._update_header(0, False).adapter is not None:
            raise RuntimeError("GPU weight transfer ships merged weights; adapter sync goes through buckets")
        source = stream_source(lambda: ((name, t) for _, name, t in self._weight_stream(with_base=False)))
        self._sender = trainer_sender(self.cfg, engines, source, rank=self.rank, master_address=master_address,
                                      master_port=master_port)

    def send_weights(self, version: int) -> None:
        if self._sender is None:
            raise RuntimeError("send_weights before connect_weight_transfer")
        self._sender.client.version = version
        self._sender.send_weights()


def sync_in_process(trainer, engines: list, version: int, with_base: bool,
                    max_bucket_bytes: int = BUCKET_BYTES) -> list[BucketInfo]:
    """The driver's protocol without Ray (tests, notebooks): one trainer rank, engines in
    this process, one bucket alive at a time. Returns what was sent."""
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
