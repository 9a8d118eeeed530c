"""Group a stream of (HF name, tensor) pairs into size-bounded buckets.

A merged GLM-5.3-Flash is ~599 GiB; weight sync must never hold it twice. The trainer
yields tensors one at a time (each gathered/merged on demand), this groups them into
buckets of at most `max_bytes` (one tensor larger than that travels alone), and each
bucket is loaded by every engine and released before the one after next is built.
"""
from collections.abc import Iterable, Iterator

import torch

DEFAULT_BUCKET_BYTES = 512 << 20
"""Big enough that per-bucket overhead (an RPC, a load_weights call) is negligible, small
enough that two buckets in flight fit in host RAM next to everything else."""


def buckets(named: Iterable[tuple[str, torch.Tensor]],
            max_bytes: int = DEFAULT_BUCKET_BYTES) -> Iterator[list[tuple[str, torch.Tensor]]]:
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > max_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket
