"""Fusion of elementwise and small-reduction chains on the GPU, where HF's numbers allow it.

mHC, the RMS norms, the clamped SwiGLU and the MoE combine are chains of elementwise ops
over [tokens, streams, hidden] tensors. Eager, each op is a kernel and a round trip
through HBM. `fused` compiles a pure tensor function with inductor when it runs on CUDA
tensors (one Triton kernel per chain, fp32 intermediates in registers); elsewhere (CPU
tests, machines without a compiler toolchain) it runs eagerly. Shapes are symbolic
(dynamic=True), so a new packed length does not recompile.

What is fused is chosen by parity: on the random-init 4-layer slice an ulp upstream of a
router or the DSA indexer flips top-k choices, and KL to HF (0.0014 all eager) rose to
0.0045-0.012 with the forward of the RMS norm, the mHC coefficients, hc_merge, the KDA
decay or its gated norm fused (the parity bisect on an H200, docs/megatron.md "Investigations"). Those
forwards stay eager in HF's op order, and only their backward chains (which no HF number
depends on) are fused; the SwiGLU, the MoE combine and the stream collapse are fused both
ways (KL 0.0012-0.0015). tests/unit/test_megatron_fused.py traces every fused function as
one graph (fullgraph) on the CPU, so an untraceable op fails there rather than silently
splitting the chain on a cluster.
"""
import functools

import torch

COMPILE_OPTIONS = {"emulate_precision_casts": True}
"""Round every intermediate to bf16 where eager PyTorch (and so HF) rounds it. Without
this, inductor keeps fp32 across the chain: more precise, but different bits (on the CPU,
a quarter of an RMS norm's outputs and half of hc_merge's differed from eager by an ulp;
with it, none)."""

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
