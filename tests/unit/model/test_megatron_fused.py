"""Every function `fused` compiles on the GPU traces as one graph and matches eager.

On the GPU these run under torch.compile(fullgraph=True, dynamic=True); a graph break or
a shape guard that fails there would only surface on the cluster. Here each is traced by
the same dynamo + AOTAutograd front end (backend "aot_eager": no code generation, so no
compiler toolchain), at two token counts, and its outputs and input gradients are
compared with the eager function. Also the hand-written NormedMix backward (gradcheck)
and its forward's bitwise equality with HF's ops.
"""
import pytest
import torch

from model.megatron import mhc, mlp, moe, rmsnorm
from model.megatron.fused import FUSED

D, N = 32, 4


def _bf16(*shape):
    return torch.randn(*shape).to(torch.bfloat16)


def _routing(tokens):
    token_A = torch.arange(tokens).repeat_interleave(2)
    return _bf16(2 * tokens, D), torch.rand(2 * tokens), token_A


SAMPLES = {
    mhc._norm_input_grad: lambda t: (torch.randn(t, N * D), _bf16(t, N * D), torch.rand(t, 1) + 0.5),
    mhc._collapse: lambda t: (torch.rand(t, N), _bf16(t, N, D)),
    mhc._hc_merge_grad: lambda t: (_bf16(t, N, D), torch.rand(t, N) * 2, torch.rand(t, N, N), _bf16(t, D),
                                   _bf16(t, N, D)),
    rmsnorm._rms_norm_grad: lambda t: (_bf16(t, D), _bf16(t, D), _bf16(D), torch.rand(t, 1) + 0.5),
    mlp._swiglu: lambda t: (_bf16(t, 2 * D) * 8, 10.0),
    mlp._swiglu_grad: lambda t: (_bf16(t, 2 * D) * 8, _bf16(t, D), 10.0),
    moe._combine: lambda t: (*_routing(t), torch.zeros(t, D)),
    moe._combine_grad: lambda t: (torch.randn(t, D), *_routing(t)),
}


def _with_grads(args):
    return [a.clone().requires_grad_(a.is_floating_point()) if torch.is_tensor(a) else a for a in args]


def _run(fn, args):
    outs = fn(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = sum((o.float() * torch.linspace(-1, 1, o.numel()).view(o.shape)).sum() for o in outs if o.is_floating_point())
    leaves = [a for a in args if torch.is_tensor(a) and a.requires_grad]
    return outs, torch.autograd.grad(loss, leaves, allow_unused=True)


def test_every_fused_function_has_a_sample():
    assert {f.__name__ for f in FUSED} == {f.__name__ for f in SAMPLES}


@pytest.mark.slow
@pytest.mark.parametrize("fn", list(SAMPLES), ids=lambda f: f.__name__)
def test_fused_function_traces_as_one_graph_and_matches_eager(fn):
    torch.manual_seed(0)
    traced = torch.compile(fn.__wrapped__, backend="aot_eager", fullgraph=True, dynamic=True)
    for tokens in (5, 12):
        args = SAMPLES[fn](tokens)
        want_out, want_grad = _run(fn, _with_grads(args))
        got_out, got_grad = _run(traced, _with_grads(args))
        for want, got in zip(want_out, got_out, strict=True):
            torch.testing.assert_close(got, want)
        for want, got in zip(want_grad, got_grad, strict=True):
            if want is not None:
                torch.testing.assert_close(got, want)


def test_normed_mix_backward_is_the_derivative():
    x = torch.randn(5, 12, dtype=torch.float64, requires_grad=True)
    fn = torch.randn(6, 12, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: mhc.NormedMix.apply(a, b, 1e-5), (x, fn))


def test_normed_mix_is_hf_order_bitwise():
    """HF's ops exactly (fp32 RMS norm of the streams, then the fp32 matmul): same bits."""
    flat, fn = _bf16(64, N * D) * 3, _bf16((2 + N) * N, N * D)
    x32 = flat.float()
    want = torch.nn.functional.linear(x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + 1e-5), fn.float())
    assert torch.equal(mhc.NormedMix.apply(flat, fn, 1e-5), want)


def _autograd_grads(fn, args):
    live = _with_grads(args)
    out = fn(*live)
    return out, torch.autograd.grad(out, [a for a in live if torch.is_tensor(a)], torch.ones_like(out) * 0.3)


@pytest.mark.parametrize("custom, plain", [
    (mhc.hc_merge, lambda post, comb, out, res: post.unsqueeze(-1) * out.unsqueeze(-2) + comb.transpose(-1, -2) @ res),
    (rmsnorm.rms_norm, lambda x, w, eps: w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))),
], ids=["hc_merge", "rms_norm"])
def test_hand_written_backward_matches_autograd_in_fp32(custom, plain):
    torch.manual_seed(0)
    args = {mhc.hc_merge: (torch.rand(7, N), torch.rand(7, N, N), torch.randn(7, D), torch.randn(7, N, D)),
            rmsnorm.rms_norm: (torch.randn(7, D) * 3, torch.rand(D) + 0.5, 1e-5)}[custom]
    want_out, want_grads = _autograd_grads(plain, args)
    got_out, got_grads = _autograd_grads(custom, args)
    torch.testing.assert_close(got_out, want_out)
    for got, want in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(got, want)
