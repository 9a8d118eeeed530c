"""Pack a TrainShard's sequences into token-budget micro-batches for the Megatron model.

Sequences are laid end to end (no padding between them), up to trainer.max_tokens_per_
microbatch tokens each micro-batch; with sequence parallelism the stream is padded to a
multiple of tp with one extra pad "sequence". Per-token results come back on the hf
backend's grid ([B, T] target columns) so the RL losses run unchanged.
Shape legend: T packed tokens, R response-scoring positions, B sequences, W grid width.
"""
from dataclasses import dataclass

import torch

from model.megatron import Packed, pack_lengths


@dataclass
class PackedBatch:
    rows: list[int]
    """Indices into the shard's sequences."""
    ids_T: torch.Tensor
    packed: Packed
    mask_BT: torch.Tensor
    """True where grid column t scores a response token (as the hf backend's MicroBatch)."""
    source_R: torch.Tensor
    """Packed position whose logit scores each grid cell below."""
    row_R: torch.Tensor
    col_R: torch.Tensor

    def to_grid(self, values_T: torch.Tensor) -> torch.Tensor:
        """Per-packed-position values -> [B, W] grid (differentiable; zeros off the responses)."""
        grid_BW = values_T.new_zeros(self.mask_BT.shape)
        grid_BW[self.row_R, self.col_R] = values_T[self.source_R]
        return grid_BW


def _groups(lengths: list[int], max_tokens: int) -> list[list[int]]:
    groups, current, used = [], [], 0
    for row, length in enumerate(lengths):
        if current and used + length > max_tokens:
            groups.append(current)
            current, used = [], 0
        current.append(row)
        used += length
    return groups + [current] if current else groups


def _one(rows: list[int], sequences, prompt_lens, pad_id: int, multiple: int, device) -> PackedBatch:
    lengths = [len(sequences[r]) for r in rows]
    pad = -sum(lengths) % multiple
    ids = [tok for r in rows for tok in sequences[r]] + [pad_id] * pad
    mask_BT = torch.zeros((len(rows), max(lengths) - 1), dtype=torch.bool)
    source, row_idx, col_idx, start = [], [], [], 0
    for i, r in enumerate(rows):
        cols = range(prompt_lens[r] - 1, lengths[i] - 1)
        mask_BT[i, prompt_lens[r] - 1: lengths[i] - 1] = True
        source += [start + c for c in cols]
        row_idx += [i] * len(cols)
        col_idx += list(cols)
        start += lengths[i]
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long, device=device)  # noqa: E731
    return PackedBatch(rows, as_long(ids), pack_lengths(lengths + ([pad] if pad else []), device),
                       mask_BT.to(device), as_long(source), as_long(row_idx), as_long(col_idx))


def pack_shard(sequences: list[list[int]], prompt_lens: list[int], pad_id: int, max_tokens: int,
               multiple: int, device) -> list[PackedBatch]:
    """Micro-batches covering every sequence once, in order."""
    return [_one(rows, sequences, prompt_lens, pad_id, multiple, device)
            for rows in _groups([len(s) for s in sequences], max_tokens)]
