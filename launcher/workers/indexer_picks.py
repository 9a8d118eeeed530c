"""The engines' DSA indexer top-k arrays as both trainers read them (hf/indexer_topk.py
records them; the format is written there). Outside the backend subpackages for the reason
batch.py gives: importing launcher.workers.hf from the Megatron trainer loads the hf backends.
Shapes: B sequences, T positions, L indexer layers, K pools per query.
"""
import numpy as np
import torch

PICK_DTYPE = np.uint16
"""Pool indices: GLM-5.3-Flash's 2048-token budget in 16-token pools keeps them far below
65,535 (ROUTE007 checks the longest sequence's pool count)."""
NO_POOL = int(np.iinfo(PICK_DTYPE).max)
"""A budget slot with no visible pool (early tokens see fewer than K complete pools)."""


def as_pools(array: np.ndarray, want: tuple[int, int, int], row: int) -> torch.Tensor:
    """One sequence's engine array as int64 [T, L, K], -1 for NO_POOL. Raises when it does not
    fit its sequence (the engine's selection of another sequence or model)."""
    if tuple(array.shape) != want or array.dtype != PICK_DTYPE:
        raise ValueError(f"sequence {row}: indexer top-k array {array.dtype}{list(array.shape)} does not fit a "
                         f"sequence of {want[0] + 1} tokens on {want[1]} indexer layers x {want[2]} pools "
                         f"(want uint16{list(want)})")
    pools = torch.from_numpy(array.astype(np.int64))
    return pools.masked_fill(pools == NO_POOL, -1)


def picks_grid(picks: list[np.ndarray], rows: list[int], sequences: list[list[int]], width: int, layers: int,
               k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(pools [B, width, L, K] int64, has [B, width]) of a micro-batch's rows (batch.py's padded
    ids, `width` columns); `has` is False where a position has no record (padding, the last token)."""
    grid = torch.full((len(rows), width, layers, k), -1, dtype=torch.long)
    has = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        n = len(sequences[r]) - 1
        grid[i, :n] = as_pools(picks[r], (n, layers, k), r)
        has[i, :n] = True
    return grid, has
