"""DSA top-k replay in the Megatron model (CPU, a world of one): the hf engine's recorded pools
given to model/megatron's indexers through an IndexerSlot, on one packed stream of two
sequences of different lengths (test_indexer_replay.py's model: two DSA layers, the second
sharing the first's selection, 4 pools of 2 per query). The engine's indexer head is
perturbed, so only its selection differs from the trainer's."""
import copy

import pytest

from tests.unit.megatron_world import init_world_of_one
from tests.unit.workers.test_indexer_replay import ARCH

torch = pytest.importorskip("torch")

LENGTHS = [24, 17, 1]
"""The last is shorter than a pool, as sequence parallelism's pad sequence can be: no pools at all."""


@pytest.fixture(scope="module")
def models():
    """(engine hf model with its own selection, the trainer's hf weights in Megatron, the same
    with the attention recomputed in backward)."""
    from launcher.workers.hf.indexer_topk import indexers
    from launcher.workers.hf.model import build_model as build_hf
    from launcher.workers.hf.model import checkpoint_state
    from model.megatron.build import build_model
    from model.megatron.spec import ModelSpec
    from model.megatron.weights import load_hf_state
    from tests.shared_compose import compose_shipped

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    init_world_of_one()
    cfg = compose_shipped(ARCH).config
    hf = build_hf(cfg.model, pad_id=0, seed=0).eval()
    spec = ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype)
    megatron = [build_model(spec, "cpu", recompute_modules=modules) for modules in (frozenset(), frozenset({"core_attn"}))]
    for meg in megatron:
        load_hf_state(meg, checkpoint_state(hf))
    engine = copy.deepcopy(hf)
    with torch.no_grad():
        (indexer,) = indexers(engine)
        indexer.weights_proj.weight.add_(torch.randn(indexer.weights_proj.weight.shape,
                                                     generator=torch.Generator().manual_seed(2)))
    yield engine, *megatron
    torch.set_num_threads(threads)


def _engine_side(engine):
    """Per sequence: token ids, the engine's logits, its pools as an engine array carries them
    (the positions before the last token, int64 with -1 for no pool)."""
    from launcher.workers.hf.compute import logits_of
    from launcher.workers.hf.indexer_topk import IndexerRecorder

    gen = torch.Generator().manual_seed(4)
    out = []
    for n in LENGTHS:
        ids = torch.randint(1, 64, (1, n), generator=gen)
        recorder = IndexerRecorder(engine)
        with torch.no_grad():
            logits = logits_of(engine, ids)[0]
        out.append((ids[0], logits, recorder.take(1)[0, : n - 1]))
        recorder.remove()
    return out


def _trainer_forward(meg, side, replay: bool, backward: bool = False):
    from model.megatron import full_logits, pack_lengths
    from model.megatron.indexer_slot import attach_indexer_slot, packed_picks

    slot, _ = attach_indexer_slot(meg, replay=replay)
    ids = torch.cat([ids for ids, _, _ in side])
    given, has = packed_picks([pools for _, _, pools in side], ids.shape[0])
    with torch.set_grad_enabled(backward), slot.active(given, has, count=True):
        logits = full_logits(meg(ids, pack_lengths(LENGTHS, "cpu")))
    if backward:  # outside the slot, as the trainer's backward: a recompute must not re-pick
        logits.pow(2).mean().backward()
    return logits.detach(), slot.counts()


def test_megatron_replays_the_engines_pools_on_a_packed_stream_and_off_disagrees(models):
    engine, meg, _ = models
    side = _engine_side(engine)
    scored = torch.cat([torch.arange(n) < n - 1 for n in LENGTHS])  # a sequence's last token has no record
    want = torch.cat([logits for _, logits, _ in side])[scored]
    pairs = sum(n - 1 for n in LENGTHS)
    on, on_counts = _trainer_forward(meg, side, replay=True)
    assert on_counts["indexer_pairs"] == on_counts["indexer_agree"] == pairs > on_counts["indexer_agree_own"]
    assert torch.allclose(on[scored], want, atol=1e-5), (on[scored] - want).abs().max()  # megatron vs hf numerics
    off, off_counts = _trainer_forward(meg, side, replay=False)
    assert off_counts["indexer_agree"] == off_counts["indexer_agree_own"] == on_counts["indexer_agree_own"]
    assert (off[scored] - want).abs().max() > 1e-3


def test_recomputed_attention_attends_over_the_given_pools(models):
    """Selective recompute of core_attn re-runs the indexer in backward, after the slot is
    left: the given pools read before the checkpoint keep its gradient the plain model's."""
    engine, meg, meg_recomputed = models
    side = _engine_side(engine)
    for model in (meg, meg_recomputed):
        model.zero_grad()
        _trainer_forward(model, side, replay=True, backward=True)
    for (name, plain), recomputed in zip(meg.named_parameters(), meg_recomputed.parameters(), strict=True):
        if plain.grad is not None:
            assert torch.allclose(plain.grad, recomputed.grad, atol=1e-7), name
