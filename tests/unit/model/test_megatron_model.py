"""The Megatron GLM-5.3-Flash model against HF glm5_next on CPU (tiny descriptor, fp32).

Weights are randomised beyond HF's init (mHC base, k-pool gate/position embedding, router
bias) so every path carries signal; sequences are longer than index_topk so the k-pool
indexer really selects pools. Command: .venv/bin/python -m pytest tests/unit/model -q -k megatron
"""
import pytest

from tests.unit.megatron_world import init_world_of_one

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

LENGTHS = [40, 23, 64]


@pytest.fixture(scope="module")
def models():
    from launcher.workers.hf.model import build_model as build_hf
    from launcher.workers.hf.model import checkpoint_state
    from model.megatron.build import build_model
    from model.megatron.spec import ModelSpec
    from model.megatron.weights import load_hf_state
    from tests.shared_compose import compose_shipped

    init_world_of_one()
    cfg = compose_shipped(["model=tiny"]).config
    hf = build_hf(cfg.model, pad_id=0, seed=0).eval()
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, param in hf.named_parameters():
            if any(k in name for k in ("base", "kpool", "norm.bias")):
                param.add_(torch.randn(param.shape, generator=gen) * 0.5)
        for name, buf in hf.named_buffers():
            if "e_score_correction_bias" in name:
                buf.copy_(torch.randn(buf.shape, generator=gen) * 0.1)
    meg = build_model(ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype), "cpu")
    load_hf_state(meg, checkpoint_state(hf))
    return hf, meg


def _inputs():
    from model.megatron import pack_lengths

    gen = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, 64, (n,), generator=gen) for n in LENGTHS]
    return ids, pack_lengths(LENGTHS, "cpu")


def test_packed_logits_match_hf_per_sequence(models):
    from device.harness.parity import kl_and_dlogp
    from model.megatron import full_logits

    hf, meg = models
    ids, packed = _inputs()
    with torch.no_grad():
        logits = full_logits(meg(torch.cat(ids), packed))
        ref = torch.cat([hf(input_ids=seq[None]).logits[0] for seq in ids])
    assert torch.allclose(logits, ref, atol=1e-5, rtol=1e-4), (logits - ref).abs().max()
    stats = kl_and_dlogp(ref, logits, torch.cat(ids).roll(-1))
    assert stats["kl_per_token"] < 1e-8 and stats["argmax_agree"] == 1.0


def test_hf_megatron_hf_round_trip_is_bit_exact(models):
    from launcher.workers.hf.model import checkpoint_state
    from model.megatron.weights import export_hf_state

    hf, meg = models
    original = checkpoint_state(hf)
    exported = export_hf_state(meg)
    assert exported.keys() == original.keys()
    assert all(torch.equal(exported[k], original[k]) for k in original)


def test_selective_recompute_keeps_gradients(models):
    from model.megatron import pack_lengths, token_logprobs
    from model.megatron.build import build_model
    from model.megatron.init import init_weights

    _, meg = models
    ids = torch.randint(0, 64, (40,), generator=torch.Generator().manual_seed(0))
    grads = []
    for modules in (frozenset(), frozenset({"core_attn", "moe", "mlp"})):
        model = build_model(meg.spec, "cpu", recompute_modules=modules)
        init_weights(model, seed=0)
        token_logprobs(model(ids, pack_lengths([40], "cpu")), ids.roll(-1)).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def _hf_layers(hf):
    return hf.model.language_model.layers


def test_mhc_module_matches_hf(models):
    hf, meg = models
    streams = torch.randn(1, 37, 4, 64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = _hf_layers(hf)[1].ffn_hc(streams)
        got = meg.layers[1].ffn_hc(streams[0])
    for w, g in zip(want, got, strict=True):
        assert torch.allclose(w[0], g, atol=1e-6), (w[0] - g).abs().max()


def test_kda_module_matches_hf(models):
    from model.megatron import pack_lengths

    hf, meg = models
    x = torch.randn(1, 50, 64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = _hf_layers(hf)[0].self_attn(x)[0]
        got = meg.layers[0].self_attention(x[0], pack_lengths([50], "cpu"))
    assert torch.allclose(want, got, atol=1e-5), (want - got).abs().max()


def test_kpool_indexer_selects_the_same_keys_as_hf(models):
    hf, meg = models
    seq = 61  # past index_topk (16) and not a multiple of the pool (4): pools are chosen, the tail is kept
    x = torch.randn(1, seq, 64, generator=torch.Generator().manual_seed(6))
    q_resid = torch.randn(1, seq, 32, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        topk = _hf_layers(hf)[3].self_attn.indexer(x, q_resid, torch.ones(1, seq, dtype=torch.bool), None)[0]
        got_ST = meg.layers[3].self_attention.indexer(x[0], q_resid[0])
    want_ST = torch.zeros(seq, seq + 1, dtype=torch.bool).scatter_(1, topk.long().clamp(min=-1) % (seq + 1), True)[:, :seq]
    assert torch.equal(want_ST, got_ST)
    assert got_ST.sum(-1).max() < seq  # really sparse


SHARED_INDEXER = ["model=tiny", "model.arch.layer_types=[linear_attention,indexed_attention,indexed_attention,linear_attention]",
                  "model.arch.indexer_types=[full,full,shared,full]"]


@pytest.mark.slow
def test_shared_indexer_layer_matches_hf_and_survives_recompute():
    """indexer_types 'shared': layer 2 attends with layer 1's selection (HF's cross-layer
    top-k reuse). Logits match HF per sequence, the weights round-trip (no indexer of its
    own), and full-layer recompute gives the same gradients: the relayed masks are captured
    at forward time, not re-read when backward recomputes the layer."""
    from launcher.workers.hf.model import build_model as build_hf
    from launcher.workers.hf.model import checkpoint_state
    from model.megatron import full_logits, token_logprobs
    from model.megatron.build import build_model
    from model.megatron.spec import ModelSpec
    from model.megatron.weights import export_hf_state, load_hf_state
    from tests.shared_compose import compose_shipped

    init_world_of_one()
    cfg = compose_shipped(SHARED_INDEXER).config
    hf = build_hf(cfg.model, pad_id=0, seed=0).eval()
    assert _hf_layers(hf)[2].self_attn.indexer is None
    spec = ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype)
    ids, packed = _inputs()
    grads = []
    for recompute in (False, True):
        meg = build_model(spec, "cpu", recompute_layers=recompute)
        load_hf_state(meg, checkpoint_state(hf))
        logits = meg(torch.cat(ids), packed)
        token_logprobs(logits, torch.cat(ids).roll(-1)).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in meg.parameters() if p.grad is not None]))
    with torch.no_grad():
        ref = torch.cat([hf(input_ids=seq[None]).logits[0] for seq in ids])
    assert torch.allclose(full_logits(logits.detach()), ref, atol=1e-5, rtol=1e-4)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    exported = export_hf_state(meg)
    assert all(torch.equal(exported[k], v) for k, v in checkpoint_state(hf).items())
    assert exported.keys() == checkpoint_state(hf).keys()
