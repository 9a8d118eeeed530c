"""MoE routes on the hf path: the engine records, per token and MoE layer, the top-k expert
ids its router chose; the trainer replays them (rollout routing replay, R3) and measures how
often its own router agrees.

The router module is transformers' top-k router (`mlp.gate` of every MoE layer):
forward(hidden [N, H]) -> (router_logits [N, E], weights [N, k], ids [N, k]). Replay keeps the
trainer's own logits and takes the given ids, weighing them by the router's own formula
(ROUTER_WEIGHTS), so the gradient reaches the router as in R3:
- glm5_next `Glm5NextTextTopkRouter`: sigmoid scores, a correction bias that only picks,
  weights = the picked scores (normalised when norm_topk_prob) x routed_scaling_factor;
- qwen3_moe `Qwen3MoeTopKRouter`: softmax over all experts, weights = the picked
  probabilities (normalised when norm_topk_prob), in the logits' dtype.

A route array is one sequence's `uint16 [seq_len - 1, moe_layers, top_k]`: positions
0..seq_len-2 (the last token is never fed to the model while sampling, and its output
scores nothing), layers in model order. Shapes: B sequences, T positions, L MoE layers,
K top_k, N = B x T tokens as the router sees them (row-major over B, T). The hooks themselves
(record, compare, count) are layer_hooks.py's, shared with indexer replay.
"""
import numpy as np
import torch

from launcher.workers.hf.layer_hooks import LayerRecorder, LayerReplay, same_sets, sequence_arrays

ROUTE_DTYPE = np.uint16
"""Expert ids fit: GLM-5.3-Flash has 288 experts (uint16 holds 65,536)."""


def _glm5_next_weights(gate: torch.nn.Module, router_logits_NE: torch.Tensor, ids_NK: torch.Tensor) -> torch.Tensor:
    weights_NK = router_logits_NE.sigmoid().gather(1, ids_NK)
    if gate.norm_topk_prob:
        weights_NK = weights_NK / (weights_NK.sum(dim=-1, keepdim=True) + 1e-20)
    return weights_NK * gate.routed_scaling_factor


def _qwen3_moe_weights(gate: torch.nn.Module, router_logits_NE: torch.Tensor, ids_NK: torch.Tensor) -> torch.Tensor:
    weights_NK = router_logits_NE.softmax(dim=-1, dtype=torch.float).gather(1, ids_NK)
    if gate.norm_topk_prob:
        weights_NK = weights_NK / weights_NK.sum(dim=-1, keepdim=True)
    return weights_NK.to(router_logits_NE.dtype)


ROUTER_WEIGHTS = {"Glm5NextTextTopkRouter": _glm5_next_weights, "Qwen3MoeTopKRouter": _qwen3_moe_weights}
"""Per router class, its weights of given experts: the model types of plan/routes.py
REPLAYED_ROUTER_MODEL_TYPES, which ROUTE001 checks before Ray."""


def moe_gates(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The router module of every MoE layer whose weights replay knows, in layer order (empty
    for a dense model)."""
    return [m.gate for m in model.modules() if hasattr(m, "gate") and hasattr(m, "experts")
            and type(m.gate).__name__ in ROUTER_WEIGHTS]


def replayed(gate: torch.nn.Module, router_logits_NE: torch.Tensor, ids_NK: torch.Tensor) -> torch.Tensor:
    """The gate weights of experts `ids_NK` from the trainer's own logits, by the router's formula."""
    return ROUTER_WEIGHTS[type(gate).__name__](gate, router_logits_NE, ids_NK)


class RouteRecorder(LayerRecorder):
    """Engine side: hooks on every MoE gate keep the ids of each forward; `take(B)` returns
    them as [B, T, L, K] (int64, on the model's device) and starts over."""

    def __init__(self, model: torch.nn.Module):
        super().__init__(moe_gates(model))

    def _picked(self, module: torch.nn.Module, output) -> torch.Tensor:
        return output[2].detach()

    def arrays(self, routes_BTLK: torch.Tensor, lengths: list[int]) -> list[np.ndarray]:
        return to_routes(routes_BTLK, lengths)


def to_routes(routes_BTLK: torch.Tensor, lengths: list[int]) -> list[np.ndarray]:
    """Each row's first `lengths[b]` positions as a uint16 array."""
    return sequence_arrays(routes_BTLK, lengths, ROUTE_DTYPE)


def routes_grid(routes: list[np.ndarray], rows: list[int], sequences: list[list[int]], width: int,
                moe_layers: int, top_k: int) -> torch.Tensor:
    """[B, width, L, K] int64 of a micro-batch's rows (batch.py's padded ids, `width` columns),
    -1 where a position has no route (padding, the last token). Raises when a route array does
    not fit its sequence (the engine's routing of another sequence or model)."""
    grid = torch.full((len(rows), width, moe_layers, top_k), -1, dtype=torch.long)
    for i, r in enumerate(rows):
        array, want = routes[r], (len(sequences[r]) - 1, moe_layers, top_k)
        if tuple(array.shape) != want or array.dtype != ROUTE_DTYPE:
            raise ValueError(f"sequence {r}: route array {array.dtype}{list(array.shape)} does not fit a sequence of "
                             f"{len(sequences[r])} tokens on {moe_layers} MoE layers x top-{top_k} "
                             f"(want uint16{list(want)})")
        grid[i, : want[0]] = torch.from_numpy(array.astype(np.int64))
    return grid


class RouteReplay(LayerReplay):
    """Trainer side: hooks on every MoE gate that, inside `active(grid)`, compare the
    router's own top-k set with the engine's per (token, layer) and, when `replay`, route
    by the engine's ids with weights from the trainer's own logits (`replayed`). Outside
    `active` the model routes by itself. `counts()` returns and resets the sums:
    route_pairs (token-layer pairs with a route), route_agree (the experts the forward used
    are the engine's set: the replayed ones, or the router's own when replay is off) and
    route_agree_own (the router's own top-k set is the engine's, replay or not)."""

    COUNT_NAMES = ("route_pairs", "route_agree", "route_agree_own")

    def __init__(self, model: torch.nn.Module, replay: bool):
        self.gates = moe_gates(model)
        super().__init__(self.gates, replay)

    def _compared(self, layer: int, module: torch.nn.Module, output, grid_NLK: torch.Tensor):
        logits_NE, _, own_NK = output
        given_NK = grid_NLK[:, layer].to(own_NK.device)
        if given_NK.shape[0] != own_NK.shape[0]:
            raise ValueError(f"routes for {given_NK.shape[0]} tokens, the router saw {own_NK.shape[0]}")
        has_N = (given_NK >= 0).all(dim=-1)
        used_NK = torch.where(has_N[:, None], given_NK, own_NK) if self.replay else own_NK
        self._tally(has_N, same_sets(used_NK, given_NK) & has_N, same_sets(own_NK, given_NK) & has_N)
        if not self.replay:
            return None
        return logits_NE, replayed(module, logits_NE, used_NK), used_NK

    def active(self, grid_BTLK: torch.Tensor | None, count: bool = True):
        """The engine's routes for the forwards inside (LayerReplay._giving)."""
        return self._giving(None if grid_BTLK is None else grid_BTLK.reshape(-1, *grid_BTLK.shape[2:]), count)
