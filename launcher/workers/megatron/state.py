"""Moving a trainer rank's memory between GPU and host (colocation), and LoRA on/off.

Megatron 0.19.2 has the RL hooks for this: its DDP buffers (weights viewed into them by the
distributed optimizer, and grads) and its optimizer states move with offload_to_cpu /
reload_from_cpu / restore_from_cpu. Weights outside those buffers (a LoRA model's frozen
base, buffers such as the router bias) move by swapping `.data` into reused pinned host
buffers (launcher/workers/pinned.py): with LoRA they are nearly all of the rank's bytes.
The optimizer goes first: the distributed optimizer's main params of fp32 weights (the
router) are views into the DDP param buffer, and copying them after the buffer's storage
is freed fails on the GPU with "CUDA error: invalid argument". Once copied they no longer
alias the buffer, which is safe: the optimizer copies every main param back into the
buffer after each step.
"""
from contextlib import contextmanager

import torch

from launcher.workers.pinned import PinnedHost


class DeviceMover:
    def __init__(self, model: torch.nn.Module, ddp=None, optimizer=None, optimizer_on_host: bool = False):
        """`optimizer_on_host` (trainer.optimizer.cpu_offload): the optimizer keeps its states
        and master weights on the host already, and its GPU side is views of the DDP buffers
        that it updates in place; offload_to_cpu would replace those views with copies."""
        self.model, self.ddp = model, ddp
        self.optimizer = None if optimizer_on_host else optimizer
        buffers = (ddp.buffers + ddp.expert_parallel_buffers) if ddp is not None else []
        self.ddp_buffers = buffers
        in_buffers = {id(p) for b in buffers if b.param_data is not None for p in b.params}
        self.loose = PinnedHost([t for t in [*model.parameters(), *model.buffers()] if id(t) not in in_buffers])
        self.device = next(model.parameters()).device

    def to_host(self) -> None:
        if self.device.type == "cpu":
            return
        torch.cuda.synchronize()
        if self.optimizer is not None:
            self.optimizer.offload_to_cpu()
        for buffer in self.ddp_buffers:
            buffer.offload_to_cpu(move_params=True, move_grads=True)
        self.loose.to_host()
        torch.cuda.empty_cache()

    def to_device(self) -> None:
        if self.device.type == "cpu":
            return
        for buffer in self.ddp_buffers:
            buffer.reload_from_cpu(move_params=True, move_grads=True)
        if self.optimizer is not None:
            self.optimizer.restore_from_cpu()
        self.loose.to_device(self.device)


@contextmanager
def lora_disabled(model: torch.nn.Module):
    """Adapters contribute nothing inside (reference log-probs, base-weight export)."""
    adapted = [m for m in model.modules() if hasattr(m, "lora_A")]
    scales = [m.scale for m in adapted]
    for module in adapted:
        module.scale = 0.0
    try:
        yield
    finally:
        for module, scale in zip(adapted, scales, strict=True):
            module.scale = scale
