"""Weight sync from the trainer ranks to every engine, streamed bucket by bucket.

    trainer ranks: begin_export(version) ........ next_bucket() -> bucket i (rank 0's; all ranks gather)
    every engine:  begin_weight_update(header) -> load_weight_bucket(bucket i) ... -> finish_weight_update(version)

The driver forwards each bucket's ObjectRef to every engine without reading it, and asks
the trainer for bucket i+1 while the engines load bucket i. It drops its reference to a
bucket once every engine has loaded it (Ray then frees the object), and before asking for
another bucket it waits until fewer than `max_alive` are alive: so at most MAX_BUCKETS_ALIVE
buckets exist in the object store (and in trainer host memory) at any time, never the model.

Each engine receives begin, the buckets and finish in that order from this one caller
(Ray runs an actor's calls from one caller in order) and refuses to generate in between,
so it switches from one whole version to the next between two generate calls. In the
async loop (wait=False) these calls queue behind the chunks an engine is generating: the
sync then waits for each engine to reach the end of its queued chunks (the trainer must not
change the weights before the export has read them, and nothing but the model's own
tensors holds them), and returns once the last bucket is handed over, leaving that
bucket's load and the finish queued; their errors surface at the next sync.

GPU engines (vLLM started with CUDA IPC or NCCL weight transfer, which the engines report
through weight_transfer()) take merged weights straight from the trainer ranks' devices:
the trainer ranks stream the same tensors through vLLM's transfer engines, which bound
their own buffers. That path runs only on GPUs (tests/gpu/test_vllm_gpu.py).
"""
import collections
from dataclasses import dataclass, field

from launcher.contract.base_identity import checkpoint_base
from launcher.plan.sync import BUCKET_BYTES, MAX_BUCKETS_ALIVE, SyncKind


@dataclass
class SyncStats:
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


def engines_hold_base(engines, kind: SyncKind, hf_path: str | None) -> bool:
    """Adapter sync (`kind`, the plan's plan.sync.kind): whether every engine already serves
    the frozen base the trainer adapts, the checkpoint `hf_path` (model.hf_path: same folder,
    same sha256 of its index) it loaded at start; then a sync asked to send the base (the
    first one) sends only the adapter. A random init (no hf_path) has no such base, and an
    engine that dropped its weights (sleep level 2) reports none."""
    if kind is not SyncKind.adapter or not hf_path:
        return False
    expected = checkpoint_base(hf_path)
    return all(loaded == expected for loaded in engines.call("loaded_base"))


def sync_weights(trainers, engines, version: int, with_base: bool, wait: bool,
                 max_bucket_bytes: int | None = None) -> SyncStats:
    """Push policy `version` from the trainer group to the engine group (orchestrate.groups)."""
    transfer = engines.weight_transfer()
    if transfer is not None:
        trainers.connect_weight_transfer(engines)
        trainers.send_weights(version, engines)
        return SyncStats(path=transfer)
    return stream_weights(trainers, engines, version, with_base, wait, max_bucket_bytes or BUCKET_BYTES)


def stream_weights(trainers, engines, version: int, with_base: bool, wait: bool, max_bucket_bytes: int,
                   max_alive: int = MAX_BUCKETS_ALIVE) -> SyncStats:
    if max_alive < 1:
        raise ValueError(f"max_alive={max_alive}: at least the bucket being loaded must be alive")
    # The header goes from the trainer to the engines without a round trip through here.
    # The trainer group's transport: host buckets, or CUDA IPC handles for an engine on rank 0's GPU.
    began = engines.begin_weight_update(trainers.begin_export(version, with_base, max_bucket_bytes,
                                                              trainers.bucket_transport))
    stats = SyncStats()
    in_flight: collections.deque = collections.deque()  # (bucket ref, the engines' load refs)

    def retire_oldest() -> None:
        _, loads = in_flight.popleft()  # the driver's last reference to that bucket goes here
        engines.wait(loads, "load_weight_bucket")

    info = None
    while info is None or not info.last:
        while len(in_flight) >= max_alive:
            retire_oldest()
        info, bucket_ref = trainers.next_bucket()
        if info is None:
            break
        in_flight.append((bucket_ref, engines.load_weight_bucket(bucket_ref)))
        del bucket_ref
        stats.buckets += 1
        stats.nbytes += info.nbytes
        stats.max_bucket_bytes = max(stats.max_bucket_bytes, info.nbytes)
        stats.max_alive = max(stats.max_alive, len(in_flight))
    if stats.buckets == 0:
        engines.wait(began, "begin_weight_update")  # a failed export fails the engines' begin: raise that
        raise RuntimeError("the trainer's weight export yielded no tensors")
    finished = engines.finish_weight_update(version)
    if wait:
        engines.wait(began, "begin_weight_update")
        while in_flight:
            retire_oldest()
        engines.wait(finished, "finish_weight_update")
        trainers.release_export()  # CUDA IPC: the last buffers rank 0 kept for the engines
    else:
        # The queued calls hold their bucket until loaded; the driver keeps only the results.
        stats.pending = [began, *(loads for _, loads in in_flight), finished]
        in_flight.clear()
    return stats


def check_pending(engines, pending: list) -> None:
    """Raise the error of a previous wait=False sync, if any (its calls are done by now or soon)."""
    for refs in pending:
        if refs:
            engines.wait(refs, "weight update")
