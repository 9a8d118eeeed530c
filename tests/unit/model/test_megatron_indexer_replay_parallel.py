"""DSA top-k replay on a TP+SP mesh of the Megatron model, two CPU processes (gloo).

On TP2 with sequence parallelism the replay is all in the forward: each TP rank's indexer
runs on the all-gathered sequence, so the slot holds the whole packed stream's pools (not a
rank's chunk, as routes are), the stream padded to a multiple of tp has no record there.
Given pools drawn at random among each query's visible ones (so they differ from the
model's own), TP2 must attend exactly over them (agreement 1.0) and give the logits of the
same model replaying them on one rank.
"""
import pytest

from tests.unit.megatron_world import megatron_core, run_on_two_ranks  # noqa: F401  (skips without megatron-core)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # two spawned processes

LENGTHS = [24, 19, 30]
"""Their sum (73) is odd: TP2's stream gets a pad token."""


def _random_pools(n: int, layers: int, budget: int, kpool: int, gen) -> torch.Tensor:
    """[n - 1, layers, budget] int64: per query, min(budget, visible) distinct visible pools, -1 after."""
    pools = torch.full((n - 1, layers, budget), -1, dtype=torch.long)
    for s in range(n - 1):
        visible = (s + 1) // kpool
        for layer in range(layers):
            chosen = torch.randperm(visible, generator=gen)[:budget]
            pools[s, layer, : len(chosen)] = chosen
    return pools


def _logits(model, ids, pools, replay: bool):
    """Full-vocabulary logits of the real tokens, packed as the trainer packs them, and the slot's counts."""
    from megatron.core import parallel_state as ps

    from model.megatron import full_logits, pack_lengths
    from model.megatron.indexer_slot import attach_indexer_slot, packed_picks

    slot, _ = attach_indexer_slot(model, replay=replay)
    flat = torch.cat(ids)
    pad = -len(flat) % ps.get_tensor_model_parallel_world_size()
    ids_T = torch.cat([flat, torch.zeros(pad, dtype=torch.long)])
    given, has = packed_picks(pools, len(ids_T))
    with torch.no_grad(), slot.active(given, has, count=True):
        logits = full_logits(model(ids_T, pack_lengths(LENGTHS + ([pad] if pad else []), "cpu")))[: len(flat)]
    return logits, slot.counts()


def _worker(rank: int, store: str, queue) -> None:
    import torch.distributed as dist

    from launcher.config.compose import compose
    from launcher.workers.hf.model import build_model as build_hf
    from tests.unit.model.test_megatron_replay_parallel import _model
    from tests.unit.workers.test_indexer_replay import ARCH

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    cfg = compose(ARCH).config
    hf = build_hf(cfg.model, pad_id=0, seed=0)
    arch, gen = cfg.model.arch, torch.Generator().manual_seed(3)
    ids = [torch.randint(1, 64, (n,), generator=gen) for n in LENGTHS]
    pools = [_random_pools(n, 1, arch.index_topk // arch.index_kpool, arch.index_kpool, gen) for n in LENGTHS]
    reference = _model(cfg, hf, (1, 1, 1))
    want, _ = _logits(reference, ids, pools, replay=True)
    own, _ = _logits(reference, ids, pools, replay=False)
    tp2 = _model(cfg, hf, (2, 1, 1))
    got, counts = _logits(tp2, ids, pools, replay=True)
    _, off = _logits(tp2, ids, pools, replay=False)
    queue.put((rank, {"replay_changes_logits": (want - own).abs().max().item(),
                      "logit_diff": (got - want).abs().max().item(), **counts,
                      "agreement_off": off["indexer_agree"] / off["indexer_pairs"]}))
    dist.barrier()
    dist.destroy_process_group()


def test_tp2_with_sequence_parallelism_attends_over_the_given_pools():
    results = run_on_two_ranks(_worker)
    for rank in (0, 1):
        stats = results[rank]
        assert stats["replay_changes_logits"] > 1e-3, stats  # random pools: not the model's own
        assert stats["indexer_pairs"] == sum(n - 1 for n in LENGTHS) == stats["indexer_agree"], (rank, stats)
        assert stats["agreement_off"] < 0.9, (rank, stats)
        assert stats["logit_diff"] < 1e-4, (rank, stats)
