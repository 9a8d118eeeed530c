"""What crosses the actor boundary in a weight sync: plain dataclasses of lists and CPU
tensors (or CUDA IPC handles, which are bytes and ints), so any trainer/engine pair can talk.

A streamed update is a WeightUpdate header, then size-bounded WeightBuckets that the driver
forwards from trainer rank 0 to every engine one after the other (pump.py), so neither side
nor Ray's object store ever holds the whole model.
"""
import warnings
from dataclasses import dataclass, field

import torch

from launcher.plan.sync import SyncTransport


@dataclass
class WeightUpdate:
    """Header of one streamed weight update; its WeightBuckets follow (pump.py).

    An engine is told `begin_weight_update(update)`, then `load_weight_bucket(bucket)` for
    every bucket in order, then `finish_weight_update(update.version)`, and refuses to
    generate in between, so no request ever runs on a half-applied update (receive.py)."""

    version: int
    adapter: dict | None = None
    """None: the buckets are full (merged) weights by HF parameter name. Otherwise the
    LoRA config (peft LoraConfig kwargs) and the stream carries the adapter's weights."""
    with_base: bool = False
    """Adapter sync only: "weights" buckets of the frozen base come before the adapter
    (first sync, after a resume or a level-2 sleep)."""


@dataclass
class IpcBuffer:
    """A bucket's tensors packed back to back in one device buffer of trainer rank 0, shared
    by CUDA IPC handle (transports/cuda_ipc.py). The fields and their meaning are those of
    vLLM's packed IPCWeightTransferUpdateInfo, so vLLM's packed consumer reads it too."""

    names: list[str]
    dtype_names: list[str]
    """torch dtype names ("bfloat16")."""
    shapes: list[list[int]]
    tensor_sizes: list[int]
    """Bytes of each tensor, in buffer order (tensor i starts at the sum of those before it)."""
    ipc_handles: dict[str, tuple]
    """{physical GPU UUID: torch's reduce_tensor args of the buffer}: an engine opens the
    handle of its own GPU (rebuild_cuda_tensor) and copies device to device."""


@dataclass
class WeightBucket:
    """One size-bounded piece of a streamed weight update: HF-named CPU tensors, or (CUDA IPC
    transport) the same tensors as handles of a device buffer."""

    kind: str
    """"weights": model parameters (full or merged weights, or an adapter's frozen base),
    loaded as they arrive; "adapter": LoRA tensors (peft names), applied at finish."""
    tensors: list[tuple[str, torch.Tensor]]
    """Empty when `ipc` carries the bucket."""
    nbytes: int
    """Bytes of the bucket's tensors (the bucket bound applies to this; one larger tensor travels alone)."""
    last: bool = False
    """The update's final bucket (the trainer knows it without another call)."""
    ipc: IpcBuffer | None = None
    """Transport cuda_ipc: the tensors stay on trainer rank 0's GPU and this names them; the
    trainer keeps the buffer until the engines are done."""
    transport: SyncTransport = SyncTransport.host
    """The transport that packed it: the engine opens the bucket with that plug-in."""

    def count(self) -> int:
        """Tensors in the bucket, whichever way they travel."""
        return len(self.ipc.names) if self.ipc is not None else len(self.tensors)

    def __reduce__(self):
        """Pickled with each tensor's bytes out of band: a uint8 numpy view, which pickle 5 hands to
        Ray as a buffer it writes straight into the object store. A torch tensor pickles in band,
        copied into a growing bytes object (the H200's merged export moved 0.27 GiB/s that way, the
        trainer's stacks in cloudpickle and realloc; benchmarks/bucket_serialization.py). The
        receiver's tensors are views of the object store's read-only memory: engines and the export's
        writer copy them (load_state_dict, vLLM's weight loaders, safetensors), never write them."""
        packed = [(name, *_as_bytes(tensor)) for name, tensor in self.tensors]
        return _unpacked_bucket, (self.kind, packed, self.nbytes, self.last, self.ipc, self.transport)


def _as_bytes(tensor: torch.Tensor) -> tuple:
    """(uint8 numpy view of a CPU tensor's bytes, dtype name, shape)."""
    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy(), str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape)


def _unpacked_bucket(kind: str, packed: list, nbytes: int, last: bool, ipc, transport) -> "WeightBucket":
    with warnings.catch_warnings():  # from_numpy of read-only memory: the tensors are only read (above)
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        tensors = [(name, torch.from_numpy(data).view(getattr(torch, dtype)).reshape(shape))
                   for name, data, dtype, shape in packed]
    return WeightBucket(kind, tensors, nbytes, last=last, ipc=ipc, transport=transport)


@dataclass
class BucketInfo:
    """What the driver reads about a bucket (it forwards the bucket itself unread)."""

    index: int
    kind: str
    tensors: int
    nbytes: int
    last: bool


@dataclass(frozen=True)
class EngineWait:
    """How long a trainer rank waits on each engine's step of a GPU weight transfer, and how
    it names them: derived by the driver (driver/actors/deadlines.py), which alone holds the plan's
    phase estimates, so the transfer's inner waits have a deadline as the driver's do."""

    whos: list[str]
    """One per engine actor, in order: `engine 0 (pid 4243, node 0 GPU 1)`."""
    seconds: float
    basis: str
    """How `seconds` was derived, for the error."""


@dataclass
class SyncStats:
    """What one sync did, as the driver's metrics report it."""

    path: str = "buckets"
    """"buckets" (through Ray's object store) or the GPU transfer ("ipc", "nccl")."""
    buckets: int = 0
    nbytes: int = 0
    """Bytes per engine (all buckets)."""
    max_bucket_bytes: int = 0
    max_alive: int = 0
    """Most buckets the driver held at once (built, not yet loaded by every engine)."""
    pending: list = field(default_factory=list)
    """wait=False: the engines' calls still queued (checked at the next sync)."""
