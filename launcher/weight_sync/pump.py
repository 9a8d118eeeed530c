"""The driver's bucket pump: weights from the trainer ranks to every engine, bucket by bucket
(the bucket transports' sync: transports/host.py, transports/cuda_ipc.py).

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

vLLM engines on GPUs take merged weights straight from the trainer ranks' devices instead
(transports/vllm_engine.py): the trainer ranks stream the same tensors through vLLM's
transfer engines, which bound their own buffers. That path runs only on GPUs
(tests/gpu/test_vllm_gpu.py).
"""
import collections

from launcher.plan.sync import BUCKET_BYTES, MAX_BUCKETS_ALIVE
from launcher.weight_sync.messages import BucketInfo, SyncStats


def stream_weights(trainers, engines, version: int, with_base: bool, wait: bool, max_bucket_bytes: int,
                   max_alive: int = MAX_BUCKETS_ALIVE) -> SyncStats:
    if max_alive < 1:
        raise ValueError(f"max_alive={max_alive}: at least the bucket being loaded must be alive")
    # The header goes from the trainer to the engines without a round trip through here.
    # The trainer group's transport (plan.sync.transport): host buckets, or CUDA IPC handles
    # for an engine on rank 0's GPU.
    began = engines.begin_weight_update(trainers.begin_export(version, with_base, max_bucket_bytes,
                                                              trainers.transport))
    stats = SyncStats()
    in_flight: collections.deque = collections.deque()  # (bucket ref, the engines' load refs)

    def retire_oldest() -> None:
        # An engine runs begin before any load: a begin that failed is why its loads fail, so its
        # error is the one to raise (on the H200 a load's "bucket outside an update" hid it).
        engines.wait(began, "begin_weight_update")
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
