"""A gloo process group of one and Megatron's parallel state on it (CPU Megatron tests)."""
import tempfile

import pytest

megatron_core = pytest.importorskip(
    "megatron.core", reason="megatron-core not installed: pip install -e '.[megatron-cpu]' to run the Megatron CPU tests")


def init_world_of_one() -> None:
    import torch.distributed as dist

    from model.megatron.build import init_parallel

    if not dist.is_initialized():
        store = tempfile.NamedTemporaryFile(prefix="gloo-", delete=False).name
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    init_parallel(1, 1, 1)


def run_on_two_ranks(worker, *args, timeout_s: float = 300) -> dict:
    """{rank: result} of `worker(rank, store, *args, queue)` in two spawned processes sharing
    a gloo file store (each puts (rank, result) on the queue); both must exit cleanly."""
    import os

    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store = tempfile.NamedTemporaryFile(prefix="gloo-", delete=False).name
    os.unlink(store)
    procs = [ctx.Process(target=worker, args=(rank, store, *args, queue)) for rank in range(2)]
    for proc in procs:
        proc.start()
    results = dict(queue.get(timeout=timeout_s) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return results
