"""CUDA IPC weight buckets: trainer rank 0 packs each bucket into one device buffer and ships
its handle; an engine on the same GPU maps that buffer and copies device to device.

Host staging (the default transport) copies every tensor device -> pageable host on the
trainer, through Ray's object store, and host -> device on the engine (~1 GiB/s on H200s).
Here the bytes never leave the GPU: one copy into the bucket's buffer on the trainer (its
stream's gathered and merged temporaries die at once), one from it into the engine's
weights. One handle per bucket, not per tensor: an engine opens one mapping per bucket.

The wire format is vLLM's packed IPC update (IPCWeightTransferUpdateInfo with packed=True,
read by vllm/distributed/weight_transfer/packed_tensor.py packed_ipc_consumer): names,
dtype_names, shapes, tensor_sizes (bytes, back to back), ipc_handles {GPU UUID: the args of
torch.multiprocessing.reductions.reduce_tensor}. vLLM's consumer calls torch's own
rebuild_cuda_tensor on those args, so this producer needs no vLLM and its buffers are what
vLLM's consumer reads.

Lifetime (the trainer must not free or reuse a buffer before the engine has copied it):
the export's CudaIpcPacking keeps each buffer until the driver has confirmed its load (the
driver asks for bucket i + MAX_BUCKETS_ALIVE only after every engine loaded bucket i; the
tail is freed by release_export after the engines' finish). torch's IPC refcount is the backstop:
reduce_tensor sets a counter the engine decrements only when its mapping is freed (after a
stream sync), and a block freed while the counter is up waits in torch's limbo instead of
returning to the allocator; torch.cuda.ipc_collect() frees it once released.
"""
import collections

import torch

from launcher.plan.sync import MAX_BUCKETS_ALIVE, SyncTransport, transfer_buffer_bytes
from launcher.weight_sync.messages import IpcBuffer, WeightBucket
from launcher.weight_sync.transports.base import TRANSPORTS, BucketTransport, Packing, Received


def gpu_uuid(device_index: int) -> str:
    """The physical GPU's UUID: the same for every process sharing it, whatever CUDA_VISIBLE_DEVICES says."""
    return str(torch.cuda.get_device_properties(device_index).uuid)


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 tensor (a copy only when it is not contiguous, e.g. a gate|up half)."""
    return tensor.detach().contiguous().view(-1).view(torch.uint8)


class PackedBucket:
    """One bucket's tensors copied, as they arrive, into a fresh device buffer.

    `capacity_bytes` comes from the plan (plan/sync.py transfer_buffer_bytes: at least the
    bucket bound and the model's largest single tensor, which travels alone), so every
    bucket fits. `kept` receives the buffer when the bucket is closed (the keep-alive)."""

    def __init__(self, capacity_bytes: int, device: torch.device, kept: list):
        self.buffer = torch.empty(capacity_bytes, dtype=torch.uint8, device=device)
        self.kept = kept
        self.names: list[str] = []
        self.dtype_names: list[str] = []
        self.shapes: list[list[int]] = []
        self.tensor_sizes: list[int] = []
        self.nbytes = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        flat = _as_bytes(tensor)
        end = self.nbytes + flat.numel()
        if end > self.buffer.numel():
            raise ValueError(f"weight {name} ({flat.numel()} bytes) does not fit the CUDA IPC bucket buffer "
                             f"({self.buffer.numel()} bytes, {self.nbytes} used): the buffer is sized from the plan "
                             "(plan/sync.py transfer_buffer_bytes, from largest_tensor_elements), which misses this "
                             "tensor; add it there")
        self.buffer[self.nbytes:end].copy_(flat)
        self.names.append(name)
        self.dtype_names.append(str(tensor.dtype).removeprefix("torch."))
        self.shapes.append(list(tensor.shape))
        self.tensor_sizes.append(flat.numel())
        self.nbytes = end

    def packed(self) -> torch.Tensor:
        """The filled part of the buffer."""
        return self.buffer[:self.nbytes]

    def bucket(self, kind: str, last: bool) -> WeightBucket:
        """The bucket as IPC handles of its buffer, which goes to `kept`."""
        from torch.multiprocessing.reductions import reduce_tensor

        torch.cuda.current_stream(self.buffer.device).synchronize()  # the engine reads a fully written buffer
        _, args = reduce_tensor(self.packed())
        self.kept.append(self.buffer)
        handles = {gpu_uuid(self.buffer.device.index): args}
        ipc = IpcBuffer(self.names, self.dtype_names, self.shapes, self.tensor_sizes, handles)
        return WeightBucket(kind, [], self.nbytes, last=last, ipc=ipc, transport=SyncTransport.cuda_ipc)


def unpack(packed: torch.Tensor, ipc: IpcBuffer) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) views of a packed uint8 buffer, in order. A tensor whose byte offset is
    not a multiple of its element size (after an odd-sized one of a smaller dtype) cannot be
    a view of the buffer, so it is copied out."""
    out, start = [], 0
    fields = zip(ipc.names, ipc.dtype_names, ipc.shapes, ipc.tensor_sizes, strict=True)
    for name, dtype_name, shape, size in fields:
        dtype = getattr(torch, dtype_name, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"weight {name}: dtype {dtype_name!r} is not a torch dtype")
        raw = packed[start:start + size]
        start += size
        if raw.storage_offset() % dtype.itemsize:
            raw = raw.clone()
        out.append((name, raw.view(dtype).view(shape)))
    return out


def open_bucket(ipc: IpcBuffer, device: torch.device, who: str) -> list[tuple[str, torch.Tensor]]:
    """The bucket's tensors as views of trainer rank 0's buffer, mapped on this process's GPU.

    The views must be dropped (or copied) before the call returns: the trainer frees the
    buffer once the driver has seen this load finish."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = gpu_uuid(index)
    if uuid not in ipc.ipc_handles:
        raise RuntimeError(f"{who} on GPU {uuid} got a CUDA IPC weight bucket exported on GPU(s) "
                           f"{sorted(ipc.ipc_handles)}: CUDA IPC needs the engine on trainer rank 0's GPU "
                           "(plan/sync.py sync_transport); other placements take host buckets")
    args = list(ipc.ipc_handles[uuid])
    args[6] = index  # reduce_tensor's storage device: the producer's index, which need not be ours
    return unpack(rebuild_cuda_tensor(*args), ipc)


class CudaIpcPacking(Packing):
    """Rank 0's buckets as device buffers of `capacity_bytes`, each kept until the engines loaded it."""

    def __init__(self, capacity_bytes: int, device: torch.device):
        self.capacity_bytes, self.device = capacity_bytes, device
        self.kept: collections.deque = collections.deque()
        """The device buffers of buckets an engine may still be reading."""

    def keep(self, tensor: torch.Tensor) -> torch.Tensor:
        """The tensor stays where it is; the bucket's buffer copies it."""
        return tensor.detach()

    def new_bucket(self) -> PackedBucket:
        return PackedBucket(self.capacity_bytes, self.device, self.kept)

    def before_next(self) -> None:
        # The driver asks for this bucket only once every engine loaded all but the newest
        # MAX_BUCKETS_ALIVE - 1 buckets, so their buffers may go (torch's IPC refcount backs this up).
        while len(self.kept) >= MAX_BUCKETS_ALIVE:
            self.kept.popleft()

    def release(self) -> None:
        """Drop the kept device buffers and have torch free any an engine released late (its IPC limbo)."""
        self.kept.clear()
        torch.cuda.ipc_collect()


@TRANSPORTS.register(SyncTransport.cuda_ipc)
class CudaIpcBuckets(BucketTransport):
    kind = SyncTransport.cuda_ipc

    def packing(self, exporter, max_bucket_bytes: int) -> Packing:
        if exporter.device.type != "cuda":
            raise ValueError(f"weight export transport={self.kind.value!r} needs trainer rank 0 on a CUDA device; it "
                             f"is on {exporter.device}: plan/sync.py sync_transport picks it for GPU clusters only "
                             "(cluster.gpu.arch), so run on one or use a cluster with gpu.arch cpu")
        capacity = transfer_buffer_bytes(exporter.cfg, max_bucket_bytes)
        # The engine on this GPU assembles fused weights on the device as buckets land: hand it
        # the blocks this process's allocator keeps cached (training's activations, init's fp32).
        torch.cuda.empty_cache()
        return CudaIpcPacking(capacity, exporter.device)

    def open(self, bucket: WeightBucket, device: torch.device, who: str) -> tuple[Received, bool]:
        return open_bucket(bucket.ipc, device, who), True
