"""Fusion of the model's elementwise and small-reduction chains on the GPU.

mHC, the RMS norms, the clamped SwiGLU and the MoE combine are chains of elementwise ops
over [tokens, streams, hidden] tensors (Sinkhorn alone is ~120 kernels a forward). Eager,
each op is a kernel and a round trip through HBM: on the 4-layer slice (4096 tokens) one
hyper-connection's fwd+bwd took 12.3 ms and a norm 2.2 ms, against 6.1 and 0.7 ms under
torch.compile (benchmarks/megatron_profile.py on an H200). `fused` compiles a pure tensor
function with inductor when it runs on CUDA tensors: same math, one Triton kernel per
chain, fp32 intermediates kept in registers. Elsewhere (CPU tests, laptops without a
compiler toolchain) the function runs eagerly. Shapes are symbolic (dynamic=True), so a
new packed length does not recompile; fullgraph=True makes an untraceable op fail loudly
instead of silently splitting the chain (tests/unit/test_megatron_fused.py traces every
fused function on the CPU).
"""
import functools

import torch

FUSED: list = []
"""Every function wrapped by `fused`, eager (the tests trace each of them)."""


def fused(fn):
    compiled = torch.compile(fn, dynamic=True, fullgraph=True)

    @functools.wraps(fn)
    def run(*args):
        return compiled(*args) if _on_cuda(args) else fn(*args)

    FUSED.append(fn)
    return run


def _on_cuda(args) -> bool:
    return any(torch.is_tensor(a) and a.is_cuda for a in args)
