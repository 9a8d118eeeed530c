"""Fusion of the model's elementwise and small-reduction chains on the GPU.

mHC, the RMS norms, the clamped SwiGLU and the MoE combine are chains of elementwise ops
over [tokens, streams, hidden] tensors (Sinkhorn alone is ~120 kernels a forward). Eager,
each op is a kernel and a round trip through HBM: on the 4-layer slice (4096 tokens) one
hyper-connection's fwd+bwd took 12.3 ms and a norm 2.2 ms, against 6.1 and 0.7 ms under
torch.compile (benchmarks/megatron_profile.py on an H200). `fused` compiles a pure tensor
function with inductor when it runs on CUDA tensors: same math, one Triton kernel per
chain, fp32 intermediates kept in registers. Elsewhere (CPU tests, laptops without a
compiler toolchain) the function runs eagerly; both give the same bf16 values. Shapes are symbolic (dynamic=True), so a
new packed length does not recompile. tests/unit/test_megatron_fused.py traces every
fused function as one graph (fullgraph) on the CPU, so an untraceable op fails there
rather than silently splitting the chain on a cluster.
"""
import functools

import torch

COMPILE_OPTIONS = {"emulate_precision_casts": True}
"""Round every intermediate to bf16 where eager PyTorch (and so HF) rounds it. Without
this, inductor keeps fp32 across the chain: more precise, but a quarter of an RMS norm's
outputs and half of hc_merge's then differ from HF's by an ulp, and on the 4-layer slice
the per-token KL to HF went from 0.0015 to 0.0165 (an ulp moves DSA pool and expert
choices downstream)."""

FUSED: list = []
"""Every function wrapped by `fused`, eager (the tests trace each of them)."""


RECOMPILE_LIMIT = 64
"""Per fused function. Each function is recompiled for every mix of grad mode, which inputs
need grads (frozen under LoRA), dtype and checkpoint recompute it meets; dynamo's default
of 8 was spent in one benchmark run. Past the limit the function runs eagerly (slower,
same values): fullgraph is left off so that this degrades instead of raising."""


def fused(fn):
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    compiled = torch.compile(fn, dynamic=True, options=COMPILE_OPTIONS)

    @functools.wraps(fn)
    def run(*args):
        return compiled(*args) if _on_cuda(args) else fn(*args)

    FUSED.append(fn)
    return run


def _on_cuda(args) -> bool:
    return any(torch.is_tensor(a) and a.is_cuda for a in args)
