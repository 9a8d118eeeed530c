"""Rollout routing replay in the Megatron model: a RouteSlot shared by every MoE block of a
rank's model holds the engine's routes of the micro-batch's local tokens while the trainer
runs a forward; each MoE block (moe.py `route`) compares its own top-k with them and, with
replay, routes by them: megatron-core's topk_routing_with_score_function at
`precomputed_indices`, i.e. gate weights from the trainer's own sigmoid scores at the given
experts, normalised and scaled as its own routing does (R3).

Layout: `given_TLK` is [T, L, K] int64 over this rank's tokens in the order the MoE block
sees them (the packed stream; with TP > 1, the rank's 1/tp chunk of it), L the MoE layers
in model order (MoE.moe_index), -1 where a token has no route (a sequence's last token,
padding). Counting happens once per MoE layer and forward (recomputation runs route again).
"""
from contextlib import contextmanager

import torch
from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function

from model.megatron.moe import MoE
from model.megatron.parallel import tp_rank, tp_size


class RouteSlot:
    def __init__(self, replay: bool):
        self.replay = replay
        self.given_TLK: torch.Tensor | None = None
        self._count, self._counted = True, set()
        self._sums = torch.zeros(3, dtype=torch.float64)

    @contextmanager
    def active(self, given_TLK: torch.Tensor, count: bool):
        self.given_TLK, self._count, self._counted = given_TLK, count, set()
        try:
            yield
        finally:
            self.given_TLK, self._count, self._counted = None, True, set()

    def apply(self, moe, logits_TE: torch.Tensor, probs_TK: torch.Tensor,
              experts_TK: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        given_TK = self.given_TLK[:, moe.moe_index].to(experts_TK.device)
        if given_TK.shape[0] != experts_TK.shape[0]:
            raise ValueError(f"MoE layer {moe.moe_index}: routes for {given_TK.shape[0]} tokens, the router saw "
                             f"{experts_TK.shape[0]}")
        has_T = (given_TK >= 0).all(dim=-1)
        used_TK = torch.where(has_T[:, None], given_TK, experts_TK) if self.replay else experts_TK
        if self._count and moe.moe_index not in self._counted:
            self._counted.add(moe.moe_index)
            given_sorted_TK = given_TK.sort(dim=-1).values
            own = ((experts_TK.sort(dim=-1).values == given_sorted_TK).all(-1) & has_T).sum()
            used = ((used_TK.sort(dim=-1).values == given_sorted_TK).all(-1) & has_T).sum()
            self._sums += torch.tensor([float(has_T.sum()), float(used), float(own)], dtype=torch.float64)
        if not self.replay:
            return probs_TK, experts_TK
        probs_TK, _ = topk_routing_with_score_function(logits_TE, moe.topk, scaling_factor=moe.scaling,
                                                       score_function="sigmoid", expert_bias=moe.expert_bias,
                                                       dense_output=True, precomputed_indices=used_TK)
        return probs_TK, used_TK

    def counts(self) -> dict[str, float]:
        pairs, agree, own = self._sums.tolist()
        self._sums.zero_()
        return {"route_pairs": pairs, "route_agree": agree, "route_agree_own": own}


def packed_routes(routes, rows: list[int], sequences, total_tokens: int, moe_layers: int, top_k: int) -> torch.Tensor:
    """[total_tokens, L, K] of a packed micro-batch (sequences end to end, then padding; as
    launcher/workers/megatron/_pack.py lays them), -1 where there is no route."""
    grid = torch.full((total_tokens, moe_layers, top_k), -1, dtype=torch.long)
    start = 0
    for r in rows:
        n = len(sequences[r])
        array = routes[r]
        if tuple(array.shape) != (n - 1, moe_layers, top_k):
            raise ValueError(f"sequence {r}: route array {list(array.shape)} does not fit a sequence of {n} tokens on "
                             f"{moe_layers} MoE layers x top-{top_k}")
        grid[start: start + n - 1] = torch.from_numpy(array.astype("int64"))
        start += n
    return grid


def attach_route_slot(model: torch.nn.Module, replay: bool) -> RouteSlot:
    """One RouteSlot on every MoE block of `model`, each block told its position among them."""
    slot = RouteSlot(replay=replay)
    for index, moe in enumerate(m for m in model.modules() if isinstance(m, MoE)):
        moe.moe_index, moe.route_slot = index, slot
    return slot


def rank_routes(grid_TLK: torch.Tensor) -> torch.Tensor:
    """The rows of a packed micro-batch's routes this rank's MoE blocks see: with TP > 1 the
    stream is sequence parallel, so this TP rank's contiguous 1/tp of it."""
    return grid_TLK.chunk(tp_size())[tp_rank()] if tp_size() > 1 else grid_TLK
