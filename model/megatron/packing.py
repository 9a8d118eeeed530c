"""Packed sequences: many sequences laid end to end in one token stream.

`cu_seqlens` (int32, [N+1]) holds the start of each sequence and the total, as in
FlashAttention and fla. Every mixing op (KDA's conv and recurrence, DSA attention and
its indexer) stays inside its sequence; everything else is per token.
"""
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Packed:
    cu_seqlens: torch.Tensor
    """int32 [N+1] on the model's device: sequence starts, then the total token count."""
    bounds: tuple[tuple[int, int], ...]
    """(start, end) of each sequence, on the host, for per-sequence loops."""
    position_T: torch.Tensor
    """Position of each token inside its own sequence (long, [T])."""

    @property
    def total(self) -> int:
        return self.bounds[-1][1] if self.bounds else 0


def pack_lengths(lengths: list[int], device: torch.device | str) -> Packed:
    """The Packed layout of sequences with these lengths, in order."""
    starts = [0]
    for length in lengths:
        starts.append(starts[-1] + length)
    bounds = tuple(zip(starts[:-1], starts[1:], strict=True))
    position_T = torch.cat([torch.arange(end - start) for start, end in bounds]) if bounds else torch.zeros(0)
    return Packed(torch.tensor(starts, dtype=torch.int32, device=device), bounds,
                  position_T.long().to(device))
