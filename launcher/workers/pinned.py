"""Pinned host copies of a rank's GPU tensors, for colocation's offload and onload each step.

A pageable `.to("cpu")` of the 4-layer slice's 46.7 GiB frozen base took ~37 s on the H200:
the driver stages pageable memory through a bounce buffer on one host thread. From pinned
memory the copy is a DMA at the link's rate. The host side is allocated and registered
with CUDA once, on the first offload, as one flat buffer per dtype, and reused: torch's
pinned allocator rounds each block up to a power of two (one 44 GiB buffer would hold
64 GiB of host memory), while cudaHostRegister pins exactly the bytes asked for.
"""
from collections import defaultdict

import torch


def _register(flat: torch.Tensor) -> None:
    """Page-lock `flat` in place (the memory stays torch's; the process's exit unpins it)."""
    nbytes = flat.numel() * flat.element_size()
    error = torch.cuda.cudart().cudaHostRegister(flat.data_ptr(), nbytes, 0)
    if int(error) != 0:
        raise RuntimeError(f"cudaHostRegister of {nbytes / 2**30:.1f} GiB failed with CUDA error {int(error)}: "
                           "the host may be short of lockable memory (ulimit -l) for colocation's offload")


class PinnedHost:
    """Moves `tensors` (by swapping `.data`) between their device and reused pinned host buffers."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.tensors = tensors
        self.views: list[torch.Tensor] | None = None

    def _allocate(self) -> list[torch.Tensor]:
        groups: dict[torch.dtype, list[int]] = defaultdict(list)
        for index, tensor in enumerate(self.tensors):
            groups[tensor.dtype].append(index)
        views: list[torch.Tensor | None] = [None] * len(self.tensors)
        for dtype, indices in groups.items():
            flat = torch.empty(sum(self.tensors[i].numel() for i in indices), dtype=dtype)
            if flat.numel():
                _register(flat)
            offset = 0
            for i in indices:
                numel = self.tensors[i].numel()
                views[i] = flat[offset:offset + numel].view(self.tensors[i].shape)
                offset += numel
        return views

    def to_host(self) -> None:
        if self.views is None:
            self.views = self._allocate()
        for tensor, view in zip(self.tensors, self.views, strict=True):
            view.copy_(tensor.data, non_blocking=True)
        torch.cuda.synchronize()
        for tensor, view in zip(self.tensors, self.views, strict=True):
            tensor.data = view

    def to_device(self, device: torch.device) -> None:
        """The host buffers stay allocated for the next offload."""
        for tensor, view in zip(self.tensors, self.views, strict=True):
            tensor.data = view.to(device, non_blocking=True)
        torch.cuda.synchronize()
