"""Colocation's trainer offload and onload: a pageable `.to()` (what DeviceMover did) against
the reused pinned buffers of launcher/workers/pinned.py, for GIB of bf16 weights shaped like
the slice's experts. Prints a table; the first pinned offload includes cudaHostRegister.

    python benchmarks/offload_bandwidth.py [GIB]
"""
import sys
import time

import torch

from launcher.workers.pinned import PinnedHost


def _timed(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _weights(gib: float) -> list[torch.Tensor]:
    shape = (4096, 6144)  # one bf16 expert matrix, 48 MiB
    count = int(gib * 2**30 / (shape[0] * shape[1] * 2))
    return [torch.nn.Parameter(torch.empty(shape, dtype=torch.bfloat16, device="cuda"), requires_grad=False)
            for _ in range(count)]


def _pageable(tensors: list[torch.Tensor], device: str) -> None:
    for tensor in tensors:
        tensor.data = tensor.data.to(device)


def main(gib: float) -> None:
    tensors = _weights(gib)
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    rows = [("pageable .to()", "to host", _timed(lambda: _pageable(tensors, "cpu"))),
            ("pageable .to()", "to device", _timed(lambda: _pageable(tensors, "cuda")))]
    host = PinnedHost(tensors)
    rows.append(("pinned, first (registers)", "to host", _timed(host.to_host)))
    rows.append(("pinned", "to device", _timed(lambda: host.to_device(torch.device("cuda")))))
    rows.append(("pinned, reused", "to host", _timed(host.to_host)))
    rows.append(("pinned", "to device", _timed(lambda: host.to_device(torch.device("cuda")))))
    print(f"{nbytes / 2**30:.1f} GiB in {len(tensors)} bf16 tensors, {torch.cuda.get_device_name()}")
    print(f"{'path':28} {'direction':10} {'s':>7} {'GB/s':>7}")
    for path, direction, seconds in rows:
        print(f"{path:28} {direction:10} {seconds:7.2f} {nbytes / seconds / 1e9:7.1f}")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 16.0)
