"""DSA top-k replay in the Megatron model: an IndexerSlot shared by every full indexer of a
rank's model holds the engine's pools of the micro-batch's packed stream while the trainer
runs a forward; each sparse attention layer with its own indexer (dsa.py `_masks`) compares
its indexer's picks with them and, with replay, builds its mask from the engine's pools (a
shared layer then reuses that mask through its TopkRelay).

Layout: `given_TLK` is [T, L, K] int64 over the whole packed stream (the indexer runs on the
TP-gathered sequence, so every TP rank sees every token), L the full indexers in model order
(SparseMLA.indexer_index), K = index_topk // index_kpool pools, -1 for no pool; `has_T` is
False where a token has no record (a sequence's last token, padding). A layer reads its
given pools before any activation checkpoint (DecoderLayer.given_picks), so a recompute in
backward, which runs after the slot is left, attends as the forward did; counting happens
only inside `active`, once per layer and sequence.
"""
from contextlib import contextmanager

import torch

from model.megatron.dsa import SparseMLA
from model.megatron.packing import Packed


class IndexerSlot:
    def __init__(self, replay: bool):
        self.replay = replay
        self.given_TLK: torch.Tensor | None = None
        self.has_T: torch.Tensor | None = None
        self._count, self._counted = True, set()
        self._sums = torch.zeros(3, dtype=torch.float64)

    @contextmanager
    def active(self, given_TLK: torch.Tensor, has_T: torch.Tensor, count: bool):
        self.given_TLK, self.has_T, self._count, self._counted = given_TLK, has_T, count, set()
        try:
            yield
        finally:
            self.given_TLK, self.has_T, self._count, self._counted = None, None, True, set()

    def given(self, layer: int, packed: Packed) -> tuple[tuple[torch.Tensor, torch.Tensor], ...] | None:
        """Per sequence of the stream, (pools [S, K], has [S]) of indexer `layer`; None outside `active`."""
        if self.given_TLK is None:
            return None
        if self.given_TLK.shape[0] != packed.total:
            raise ValueError(f"indexer top-k for {self.given_TLK.shape[0]} tokens, the stream has {packed.total}")
        return tuple((self.given_TLK[start:end, layer], self.has_T[start:end]) for start, end in packed.bounds)

    def apply(self, layer: int, sequence: int, own_SK: torch.Tensor,
              given: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The pools the layer attends over: the engine's with replay (its own where there is no
        record), else its own; counts the agreement when active."""
        given_SK, has_S = (t.to(own_SK.device) for t in given)
        used_SK = torch.where(has_S[:, None], given_SK, own_SK) if self.replay else own_SK
        if self.given_TLK is not None and self._count and (layer, sequence) not in self._counted:
            self._counted.add((layer, sequence))
            given_sorted_SK = given_SK.sort(dim=-1).values
            own = ((own_SK.sort(dim=-1).values == given_sorted_SK).all(-1) & has_S).sum()
            used = ((used_SK.sort(dim=-1).values == given_sorted_SK).all(-1) & has_S).sum()
            self._sums += torch.tensor([float(has_S.sum()), float(used), float(own)], dtype=torch.float64)
        return used_SK

    def counts(self) -> dict[str, float]:
        pairs, agree, own = self._sums.tolist()
        self._sums.zero_()
        return {"indexer_pairs": pairs, "indexer_agree": agree, "indexer_agree_own": own}


def packed_picks(pools: list[torch.Tensor], total_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(given [total_tokens, L, K], has [total_tokens]) of a packed micro-batch (sequences end to
    end, then padding, as launcher/workers/megatron/_pack.py lays them); `pools` holds one
    [n - 1, L, K] int64 tensor per sequence of n tokens, in packing order."""
    layers, k = pools[0].shape[1:]
    grid = torch.full((total_tokens, layers, k), -1, dtype=torch.long)
    has = torch.zeros(total_tokens, dtype=torch.bool)
    start = 0
    for pools_TLK in pools:
        n = pools_TLK.shape[0]
        grid[start: start + n], has[start: start + n] = pools_TLK, True
        start += n + 1
    return grid, has


def attach_indexer_slot(model: torch.nn.Module, replay: bool) -> tuple[IndexerSlot, list[SparseMLA]]:
    """One IndexerSlot on every sparse attention layer with its own indexer, each told its
    position among them; returns the slot and those layers."""
    slot = IndexerSlot(replay=replay)
    layers = [m for m in model.modules() if isinstance(m, SparseMLA) and m.indexer is not None]
    for index, attention in enumerate(layers):
        attention.indexer_index, attention.indexer_slot = index, slot
    return slot, layers
