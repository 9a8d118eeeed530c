"""DSA top-k replay on the hf path: the hf engine's indexer hooks record the k-pools each query
selected (prefill and decode alike), the hf trainer's indexer attends over the given pools,
and indexer_agreement counts how often its own choice was the engine's.

The model is two DSA layers (the second shares the first's selection) with index_topk 8 in
pools of 2: 4 pools per query, so every query past position 9 really selects. The engine
is made to choose differently by perturbing only its indexer's head weights, which feed
the selection and nothing else: with replay the trainer's forward is then the engine's."""
import copy

import numpy as np
import pytest
import torch

from launcher.contract.messages import SamplingParams
from launcher.workers.hf.compute import logits_of
from launcher.workers.hf.indexer_topk import IndexerRecorder, IndexerReplay, indexers, join_output, split_output
from launcher.workers.hf.sampling import sample
from launcher.workers.indexer_picks import NO_POOL, PICK_DTYPE, picks_grid

ARCH = ["model=tiny", "model.arch.num_hidden_layers=2", "model.arch.layer_types=[indexed_attention,indexed_attention]",
        "model.arch.mlp_layer_types=[dense,dense]", "model.arch.indexer_types=[full,shared]",
        "model.arch.index_topk=8", "model.arch.index_kpool=2", "model.arch.index_n_heads=8"]
"""8 indexer heads, not tiny's 2: with 2, relu(q . k) is 0 on every head for many pools, and
topk breaks such exact ties by position, differently for a 14- and a 22-token forward of the
same prefix (engine prefill vs trainer), which replay fixes but an agreement test of equal
weights must not see."""
POOLS, KPOOL, LENGTH = 4, 2, 24


@pytest.fixture(scope="module")
def base():
    """The model without hooks (each test hooks a copy); one thread: its matmuls are too small to split."""
    from launcher.workers.hf.model import build_model
    from tests.shared_compose import compose_shipped

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield build_model(compose_shipped(ARCH).config.model, pad_id=0, seed=0).eval()
    torch.set_num_threads(threads)


def _ids(batch=2, length=LENGTH, seed=0) -> torch.Tensor:
    return torch.randint(1, 64, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def _recorded(model, ids_BT):
    """(pools [B, S, L, K], logits) of a full forward, as the engine's recorder sees it."""
    recorder = IndexerRecorder(model)
    logits = logits_of(model, ids_BT)
    pools = recorder.take(ids_BT.shape[0])
    recorder.remove()
    return pools, logits


@torch.no_grad()
def _replayed(model, ids_BT, pools_BSLK, replay: bool):
    replayer = IndexerReplay(model, replay=replay)
    with replayer.active(pools_BSLK, torch.ones(ids_BT.shape, dtype=torch.bool)):
        logits = logits_of(model, ids_BT)
    return logits, replayer.counts()


def _key_sets(tokens_BSW: torch.Tensor, keys: int) -> torch.Tensor:
    """[B, S, keys] bool: the keys each query attends (as the attention builds its mask)."""
    valid = tokens_BSW >= 0
    sets = torch.zeros(*tokens_BSW.shape[:2], keys + 1, dtype=torch.bool)
    return sets.scatter_(-1, tokens_BSW.long().masked_fill(~valid, keys), True)[..., :keys]


def test_pools_are_read_from_the_indexer_output_and_written_back(base):
    model, outputs = copy.deepcopy(base), []
    indexers(model)[0].register_forward_hook(lambda m, a, out: outputs.append(out))
    with torch.no_grad():
        logits_of(model, _ids(batch=1))
    (out_BSW,) = outputs
    pools_BSK, rest_BSW = split_output(out_BSW, KPOOL, POOLS)
    visible_S = torch.arange(1, LENGTH + 1) // KPOOL  # complete pools a query sees
    for s, pools in enumerate(pools_BSK[0].tolist()):
        chosen = {p for p in pools if p >= 0}
        assert len(chosen) == min(POOLS, int(visible_S[s])) and all(p < visible_S[s] for p in chosen)
    assert (visible_S > POOLS).sum() >= 10  # queries that really select
    rebuilt = join_output(pools_BSK, rest_BSW, KPOOL)
    assert torch.equal(_key_sets(rebuilt, LENGTH), _key_sets(out_BSW, LENGTH))


def test_replaying_the_indexers_own_pools_changes_nothing(base):
    model = copy.deepcopy(base)
    ids = _ids()
    pools, logits = _recorded(model, ids)
    replayed, counts = _replayed(model, ids, pools, replay=True)
    assert torch.equal(replayed, logits)
    assert counts == {"indexer_pairs": 2 * LENGTH, "indexer_agree": 2 * LENGTH, "indexer_agree_own": 2 * LENGTH}


def test_replay_attends_as_the_engine_did_and_off_disagrees(base):
    engine, ids = copy.deepcopy(base), _ids(seed=1)
    with torch.no_grad():
        (indexer,) = indexers(engine)
        head = indexer.weights_proj.weight
        head.add_(torch.randn(head.shape, generator=torch.Generator().manual_seed(2)))
    pools, engine_logits = _recorded(engine, ids)
    off, off_counts = _replayed(copy.deepcopy(base), ids, pools, replay=False)
    assert off_counts["indexer_agree"] == off_counts["indexer_agree_own"] < off_counts["indexer_pairs"]
    assert (off - engine_logits).abs().max() > 1e-3
    on, on_counts = _replayed(copy.deepcopy(base), ids, pools, replay=True)
    assert on_counts["indexer_agree"] == on_counts["indexer_pairs"] == 2 * LENGTH
    assert on_counts["indexer_agree_own"] == off_counts["indexer_agree_own"]
    assert torch.equal(on, engine_logits)  # the same keys for every query: the engine's computation exactly


def test_sampling_records_prompt_and_response_and_the_trainer_agrees(base):
    """Prefill and decode steps recorded as one array per sequence, the positions a full
    forward of prompt + response sees; the same weights choose the same pools."""
    model = copy.deepcopy(base)
    prompts = _ids(length=14).tolist()
    recorder = IndexerRecorder(model)
    results = sample(model, prompts, SamplingParams(max_tokens=8), (), 0, seed=3, recorders={"indexer_topk": recorder})
    recorder.remove()
    sequences = [p + r.tokens for p, r in zip(prompts, results, strict=True)]
    arrays = [r.indexer_topk for r in results]
    assert [a.shape for a in arrays] == [(len(s) - 1, 1, POOLS) for s in sequences]
    assert all(a.dtype == PICK_DTYPE for a in arrays) and (arrays[0][0] == NO_POOL).all()  # position 0 sees no pool
    grid, has = picks_grid(arrays, [0, 1], sequences, len(sequences[0]), 1, POOLS)
    replayer = IndexerReplay(model, replay=False)
    with torch.no_grad(), replayer.active(grid, has):
        logits_of(model, torch.tensor(sequences))
    counts = replayer.counts()
    assert counts["indexer_pairs"] == sum(len(s) - 1 for s in sequences) == counts["indexer_agree_own"]


def test_pool_arrays_are_uint16_and_must_fit_their_sequence():
    arrays = [np.full((4, 1, POOLS), NO_POOL, dtype=PICK_DTYPE), np.zeros((2, 1, POOLS), dtype=PICK_DTYPE)]
    grid, has = picks_grid(arrays, [0, 1], [[1] * 5, [1] * 3], 6, 1, POOLS)
    assert grid.shape == (2, 6, 1, POOLS) and (grid[0] == -1).all() and (grid[1, :2] == 0).all()
    assert has.tolist() == [[True] * 4 + [False] * 2, [True] * 2 + [False] * 4]
    with pytest.raises(ValueError, match="does not fit a sequence of 4 tokens"):
        picks_grid(arrays, [0], [[1] * 4], 6, 1, POOLS)
    with pytest.raises(ValueError, match="uint16"):
        picks_grid([arrays[0].astype(np.int32)], [0], [[1] * 5], 6, 1, POOLS)
