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
