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
W the indexer's output width. The hooks themselves (record, compare, count) are
layer_hooks.py's, shared with routing replay.
"""
import numpy as np
import torch

from launcher.workers.hf.layer_hooks import LayerRecorder, LayerReplay, same_sets, sequence_arrays
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


class IndexerRecorder(LayerRecorder):
    """Engine side: hooks on every indexer keep the pools of each forward; `take()` returns
    them as [B, S, L, K] (int64, -1 for no pool, on the model's device) and starts over."""

    def __init__(self, model: torch.nn.Module):
        super().__init__(indexers(model))

    def _picked(self, module: torch.nn.Module, output) -> torch.Tensor:
        return split_output(output, module.index_kpool, pools_per_query(module))[0]

    def arrays(self, pools_BSLK: torch.Tensor, lengths: list[int]) -> list[np.ndarray]:
        """Each row's first `lengths[b]` positions as a uint16 array, NO_POOL for none."""
        return sequence_arrays(pools_BSLK.masked_fill(pools_BSLK < 0, NO_POOL), lengths, PICK_DTYPE)


class IndexerReplay(LayerReplay):
    """Trainer side: hooks on every indexer that, inside `active(grid, has)`, compare the
    indexer's own pools with the engine's per (token, layer) and, when `replay`, attend over
    the engine's pools (its own tail tokens kept). Outside `active` the indexer chooses by
    itself. `counts()` returns and resets the sums: indexer_pairs (token-layer pairs with a
    record), indexer_agree (the pools the attention used are the engine's) and
    indexer_agree_own (the indexer's own pools are the engine's, replay or not)."""

    COUNT_NAMES = ("indexer_pairs", "indexer_agree", "indexer_agree_own")

    def __init__(self, model: torch.nn.Module, replay: bool):
        self.indexers = indexers(model)
        super().__init__(self.indexers, replay)

    def _compared(self, layer: int, module: torch.nn.Module, output, given: tuple[torch.Tensor, torch.Tensor]):
        grid_BSLK, has_BS = given
        own_BSK, rest_BSW = split_output(output, module.index_kpool, pools_per_query(module))
        given_BSK = grid_BSLK[:, :, layer].to(own_BSK.device)
        if given_BSK.shape != own_BSK.shape:
            raise ValueError(f"indexer top-k for {list(given_BSK.shape)}, the indexer chose {list(own_BSK.shape)}")
        has_BS = has_BS.to(own_BSK.device)
        used_BSK = torch.where(has_BS[..., None], given_BSK, own_BSK) if self.replay else own_BSK
        self._tally(has_BS, same_sets(used_BSK, given_BSK) & has_BS, same_sets(own_BSK, given_BSK) & has_BS)
        return join_output(used_BSK, rest_BSW, module.index_kpool) if self.replay else None

    def active(self, grid_BSLK: torch.Tensor | None, has_BS: torch.Tensor | None, count: bool = True):
        """The engine's pools for the forwards inside (LayerReplay._giving)."""
        return self._giving(None if grid_BSLK is None else (grid_BSLK, has_BS), count)
