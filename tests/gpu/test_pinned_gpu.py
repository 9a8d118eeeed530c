"""Colocation's pinned host copies (launcher/workers/pinned.py) on a CUDA GPU: a round trip
is bit-exact across dtypes, the host side is page-locked, and later offloads reuse it."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_round_trip_is_exact_and_reuses_pinned_buffers():
    from launcher.workers.pinned import PinnedHost

    device = torch.device("cuda")
    tensors = [torch.randn(257, 33, device=device, dtype=torch.bfloat16),
               torch.nn.Parameter(torch.randn(7, device=device), requires_grad=False),
               torch.randn(3, 5, device=device, dtype=torch.bfloat16).t(),  # not contiguous
               torch.arange(11, device=device)]
    expected = [t.detach().clone() for t in tensors]
    host = PinnedHost(tensors)
    host.to_host()
    pointers = [t.data_ptr() for t in tensors]
    assert all(t.device.type == "cpu" and t.is_pinned() for t in tensors)
    for _ in range(2):
        host.to_device(device)
        assert all(t.is_cuda for t in tensors)
        for got, want in zip(tensors, expected, strict=True):
            assert torch.equal(got, want)
        host.to_host()
    assert [t.data_ptr() for t in tensors] == pointers  # the same host memory every time
