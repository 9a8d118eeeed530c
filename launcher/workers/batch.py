"""Turn a TrainShard (lists) into padded per-micro-batch tensors: the token grid both
trainer backends and the shared loss (`loss.py`) read. It lives outside the backend
subpackages because importing one of those registers its classes: under `hf/` it made
`python -m launcher trainer.backend=megatron` fail with a circular import (_loss ->
hf package -> hf trainer -> _loss), which in-process tests that import hf first hid.

Shape legend: B sequences, T target positions (one less than the padded length); column
t scores token t+1, so a response starting at prompt_len is scored from column
prompt_len - 1.
"""
from dataclasses import dataclass

import torch


def pad_right(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids_BT, valid_BT) for variable-length sequences, padded on the right.

    Right padding is exact for a causal model: padded positions come after every real one.
    """
    width = max(len(s) for s in seqs)
    ids_BT = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    valid_BT = torch.zeros((len(seqs), width), dtype=torch.bool)
    for row, seq in enumerate(seqs):
        ids_BT[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        valid_BT[row, : len(seq)] = True
    return ids_BT, valid_BT


@dataclass
class MicroBatch:
    rows: list[int]
    """Indices into the shard's sequences."""
    ids_BT: torch.Tensor
    mask_BT: torch.Tensor


def split_rows(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Consecutive rows grouped so rows x longest length stays within the token budget."""
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for row, length in enumerate(lengths):
        if current and (len(current) + 1) * max(longest, length) > max_tokens:
            groups.append(current)
            current, longest = [], 0
        current.append(row)
        longest = max(longest, length)
    if current:
        groups.append(current)
    return groups


def micro_batches(sequences: list[list[int]], prompt_lens: list[int], pad_id: int,
                  max_tokens: int) -> list[MicroBatch]:
    out = []
    for rows in split_rows([len(s) for s in sequences], max_tokens):
        ids_BT, _ = pad_right([sequences[r] for r in rows], pad_id)
        mask_BT = torch.zeros((len(rows), ids_BT.shape[1] - 1), dtype=torch.bool)
        for i, r in enumerate(rows):
            mask_BT[i, prompt_lens[r] - 1: len(sequences[r]) - 1] = True
        out.append(MicroBatch(rows, ids_BT, mask_BT))
    return out


def keep_model_tokens(batch, shard) -> None:
    """Multi-turn episodes: the environment's observation tokens leave `batch.mask_BT` (a
    MicroBatch or megatron's PackedBatch), so the loss, its token normaliser, entropy, KL and
    the off-policy weights count the model's own tokens only. Without loss masks, nothing."""
    if shard.loss_masks is None:
        return
    keep_BT = torch.zeros(batch.mask_BT.shape, dtype=torch.bool)
    for i, r in enumerate(batch.rows):
        start = shard.prompt_lens[r] - 1
        keep_BT[i, start: start + len(shard.loss_masks[r])] = torch.tensor(shard.loss_masks[r], dtype=torch.bool)
    batch.mask_BT = batch.mask_BT & keep_BT.to(batch.mask_BT.device)


def grid(values: list[list[float]], mb: MicroBatch, prompt_lens: list[int]) -> torch.Tensor:
    """Per-response-token values placed at their target columns (zeros elsewhere)."""
    out_BT = torch.zeros(mb.mask_BT.shape, dtype=torch.float32)
    for i, r in enumerate(mb.rows):
        start = prompt_lens[r] - 1
        out_BT[i, start: start + len(values[r])] = torch.tensor(values[r], dtype=torch.float32)
    return out_BT


def ungrid(values_BT: torch.Tensor, mb: MicroBatch, prompt_lens: list[int], sequences) -> list[list[float]]:
    """The inverse of `grid`: each row's response-token values as a list."""
    out = []
    for i, r in enumerate(mb.rows):
        start = prompt_lens[r] - 1
        out.append(values_BT[i, start: len(sequences[r]) - 1].tolist())
    return out
