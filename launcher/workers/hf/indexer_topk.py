"""DSA indexer top-k on the hf path: the engine records, per token and indexer layer, the
k-pools its DSA indexer selected; the trainer's indexer attends over those instead of its
own choice (indexer replay) and counts how often its own choice agrees.

The module is transformers' glm5_next `Glm5NextTextIndexer` (`self_attn.indexer` of every
indexed_attention layer whose indexer_types entry is `full`; a `shared` layer attends with
the selection of the one before it, so replaying the full ones replays both). It returns
int32 token indices [B, S, W]: first the selected pools as runs of index_kpool consecutive
tokens (index_topk // index_kpool runs, a run of -1 where the budget has no visible pool
left), then the query's incomplete tail pool token by token, then -1. A run whose last
token is valid is a selected pool (a tail holds at most kpool - 1 tokens), so the pools are
read from the output and written back into it without re-running the indexer's scoring.

A pool is named by its index from the sequence start (first token // kpool): no path pads
on the left (sampling.py batches prompts of one length, batch.py pads right, the Megatron
trainer packs). With index_kpool 1 a pool is a token.

An array is one sequence's uint16 [seq_len - 1, indexer_layers, index_topk // index_kpool]
(positions as routes: the last token is never fed), NO_POOL where the budget had no pool
(launcher/workers/indexer_picks.py, which both trainers read them with). Shapes: B
sequences, S positions, L indexer layers, K pools per query, R the pool width (index_kpool),
W the indexer's output width.
"""
from contextlib import contextmanager

import numpy as np
import torch

from launcher.workers.indexer_picks import NO_POOL, PICK_DTYPE


def indexers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every DSA indexer module, in layer order (empty without a `full` indexed_attention layer)."""
    return [m for m in model.modules() if type(m).__name__.endswith("TextIndexer")]


def pools_per_query(indexer: torch.nn.Module) -> int:
    return indexer.index_topk // indexer.index_kpool


def split_output(tokens_BSW: torch.Tensor, kpool: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(pools_BSK int64, -1 for a run with no pool; the other tokens [B, S, W'], -1 elsewhere)."""
    runs_BSKR = tokens_BSW[..., : k * kpool].long().reshape(*tokens_BSW.shape[:2], k, kpool)
    is_pool_BSK = runs_BSKR[..., -1] >= 0
    pools_BSK = torch.where(is_pool_BSK, runs_BSKR[..., 0] // kpool, -1)
    rest_BSW = torch.cat([runs_BSKR.masked_fill(is_pool_BSK[..., None], -1).flatten(-2),
                          tokens_BSW[..., k * kpool:].long()], dim=-1)
    return pools_BSK, rest_BSW


def join_output(pools_BSK: torch.Tensor, rest_BSW: torch.Tensor, kpool: int) -> torch.Tensor:
    """The indexer's output for these pools and other tokens (int32; column order differs from
    the indexer's own, which the attention mask, a set, ignores)."""
    runs_BSKR = pools_BSK[..., None] * kpool + torch.arange(kpool, device=pools_BSK.device)
    runs_BSKR = runs_BSKR.masked_fill(pools_BSK[..., None] < 0, -1)
    return torch.cat([runs_BSKR.flatten(-2), rest_BSW], dim=-1).to(torch.int32)


def same_sets(a_NK: torch.Tensor, b_NK: torch.Tensor) -> torch.Tensor:
    """Per row, whether the two selections hold the same pools (order ignored)."""
    return (a_NK.sort(dim=-1).values == b_NK.sort(dim=-1).values).all(dim=-1)


class IndexerRecorder:
    """Engine side: hooks on every indexer keep the pools of each forward; `take()` returns
    them as [B, S, L, K] (int64, -1 for no pool, on the model's device) and starts over."""

    def __init__(self, model: torch.nn.Module):
        self.indexers = indexers(model)
        self._pools: list[torch.Tensor | None] = [None] * len(self.indexers)
        self._handles = [m.register_forward_hook(self._hook(i)) for i, m in enumerate(self.indexers)]

    def _hook(self, layer: int):
        def hook(module, args, output):
            self._pools[layer] = split_output(output, module.index_kpool, pools_per_query(module))[0]
        return hook

    def take(self, batch: int) -> torch.Tensor:
        pools = [p.reshape(batch, -1, p.shape[-1]) for p in self._pools]
        self._pools = [None] * len(self.indexers)
        return torch.stack(pools, dim=2)

    def arrays(self, pools_BSLK: torch.Tensor, lengths: list[int]) -> list[np.ndarray]:
        """Each row's first `lengths[b]` positions as a uint16 array, NO_POOL for none."""
        cpu = pools_BSLK.masked_fill(pools_BSLK < 0, NO_POOL).to(torch.int32).cpu().numpy()
        return [np.ascontiguousarray(cpu[b, :n]).astype(PICK_DTYPE) for b, n in enumerate(lengths)]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


class IndexerReplay:
    """Trainer side: hooks on every indexer that, inside `active(grid, has)`, compare the
    indexer's own pools with the engine's per (token, layer) and, when `replay`, attend over
    the engine's pools (its own tail tokens kept). Outside `active` the indexer chooses by
    itself. `counts()` returns and resets the sums: indexer_pairs (token-layer pairs with a
    record), indexer_agree (the pools the attention used are the engine's) and
    indexer_agree_own (the indexer's own pools are the engine's, replay or not)."""

    def __init__(self, model: torch.nn.Module, replay: bool):
        self.indexers, self.replay = indexers(model), replay
        self._grid_BSLK: torch.Tensor | None = None
        self._has_BS: torch.Tensor | None = None
        self._count = True
        self._sums = torch.zeros(3, dtype=torch.float64)
        for i, indexer in enumerate(self.indexers):
            indexer.register_forward_hook(self._hook(i))

    def _hook(self, layer: int):
        def hook(module, args, output):
            if self._grid_BSLK is None:
                return None
            own_BSK, rest_BSW = split_output(output, module.index_kpool, pools_per_query(module))
            given_BSK = self._grid_BSLK[:, :, layer].to(own_BSK.device)
            if given_BSK.shape != own_BSK.shape:
                raise ValueError(f"indexer top-k for {list(given_BSK.shape)}, the indexer chose {list(own_BSK.shape)}")
            has_BS = self._has_BS.to(own_BSK.device)
            used_BSK = torch.where(has_BS[..., None], given_BSK, own_BSK) if self.replay else own_BSK
            if self._count:
                own_agrees = (same_sets(own_BSK, given_BSK) & has_BS).sum()
                used_agrees = (same_sets(used_BSK, given_BSK) & has_BS).sum()
                self._sums += torch.tensor([float(has_BS.sum()), float(used_agrees), float(own_agrees)],
                                           dtype=torch.float64)
            return join_output(used_BSK, rest_BSW, module.index_kpool) if self.replay else None
        return hook

    @contextmanager
    def active(self, grid_BSLK: torch.Tensor | None, has_BS: torch.Tensor | None, count: bool = True):
        """The engine's pools for the forwards inside (None: the indexer chooses, nothing
        counted); `count` False replays without counting (the log-prob pass)."""
        if grid_BSLK is None:
            yield
            return
        self._grid_BSLK, self._has_BS, self._count = grid_BSLK, has_BS, count
        try:
            yield
        finally:
            self._grid_BSLK, self._has_BS, self._count = None, None, True

    def counts(self) -> dict[str, float]:
        pairs, agree, own = self._sums.tolist()
        self._sums.zero_()
        return {"indexer_pairs": pairs, "indexer_agree": agree, "indexer_agree_own": own}
