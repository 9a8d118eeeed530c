"""What the hf path's two replays share, written once: rollout routing replay (routing.py,
hooked on every MoE gate) and indexer replay (indexer_topk.py, hooked on every DSA indexer)
both record, on the engine, what each hooked layer picked per token, and compare (and, when
replaying, override) it on the trainer. Each of those files keeps only which modules it hooks,
how it reads a module's output and what it hands back; the hooks, the per-layer buffers, the
`active` window and the agreement sums are here.

Picks are int64 per token and layer, K of them (experts or pools), -1 for none. Shapes: B
sequences, T positions, L hooked layers, K picks per token, N = B x T tokens.
"""
from contextlib import contextmanager

import numpy as np
import torch


def same_sets(a_NK: torch.Tensor, b_NK: torch.Tensor) -> torch.Tensor:
    """Per row, whether the two picks hold the same ids (order ignored)."""
    return (a_NK.sort(dim=-1).values == b_NK.sort(dim=-1).values).all(dim=-1)


def sequence_arrays(picks_BTLK: torch.Tensor, lengths: list[int], dtype) -> list[np.ndarray]:
    """Each row's first `lengths[b]` positions as a `dtype` array: the format a generation
    carries to the trainer (the caller maps -1 to its own no-pick value first)."""
    cpu = picks_BTLK.to(torch.int32).cpu().numpy()
    return [np.ascontiguousarray(cpu[b, :n]).astype(dtype) for b, n in enumerate(lengths)]


class LayerRecorder:
    """Engine side: a forward hook on each of `modules` keeps `_picked(module, output)` of its
    latest forward; `take(B)` returns them as [B, T, L, K] (on the model's device) and starts
    over, so sampling takes one slice per prefill or decode step. `remove()` unhooks."""

    def __init__(self, modules: list[torch.nn.Module]):
        self.modules = modules
        self._picks: list[torch.Tensor | None] = [None] * len(modules)
        self._handles = [m.register_forward_hook(self._hook(i)) for i, m in enumerate(modules)]

    def _picked(self, module: torch.nn.Module, output) -> torch.Tensor:
        """The layer's picks in one forward, [N, K] or [B, T, K] (the subclass reads its module)."""
        raise NotImplementedError

    def _hook(self, layer: int):
        def hook(module, args, output):
            self._picks[layer] = self._picked(module, output)
        return hook

    def take(self, batch: int) -> torch.Tensor:
        picks = [p.reshape(batch, -1, p.shape[-1]) for p in self._picks]
        self._picks = [None] * len(self.modules)
        return torch.stack(picks, dim=2)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


class LayerReplay:
    """Trainer side: a forward hook on each of `modules` that, inside the subclass's `active`
    window, hands the layer's output and the engine's picks to `_compared` (whose return value,
    when not None, replaces the output: the replay); outside it the model runs by itself.
    `_tally` sums, per forward, the token-layer pairs with an engine record, those whose used
    picks are the engine's, and those whose own picks are; `counts()` returns the sums under
    COUNT_NAMES and resets them."""

    COUNT_NAMES: tuple[str, str, str]
    """The metric names of (pairs, used picks agree, own picks agree)."""

    def __init__(self, modules: list[torch.nn.Module], replay: bool):
        self.replay = replay
        self._given = None
        """The engine's picks while `_giving`, in the subclass's form; None otherwise."""
        self._count = True
        self._sums = torch.zeros(3, dtype=torch.float64)
        for layer, module in enumerate(modules):
            module.register_forward_hook(self._hook(layer))

    def _compared(self, layer: int, module: torch.nn.Module, output, given):
        """Tally the layer's agreement with `given`; the replayed output, or None to keep the layer's."""
        raise NotImplementedError

    def _hook(self, layer: int):
        def hook(module, args, output):
            return None if self._given is None else self._compared(layer, module, output, self._given)
        return hook

    @contextmanager
    def _giving(self, given, count: bool):
        """The engine's picks for the forwards inside (None: the model picks, nothing counted);
        `count` False replays without counting (the log-prob pass before a step's updates)."""
        if given is None:
            yield
            return
        self._given, self._count = given, count
        try:
            yield
        finally:
            self._given, self._count = None, True

    def _tally(self, has: torch.Tensor, used_agrees: torch.Tensor, own_agrees: torch.Tensor) -> None:
        """Add one layer's boolean masks over its tokens, unless this window does not count."""
        if self._count:
            self._sums += torch.tensor([float(has.sum()), float(used_agrees.sum()), float(own_agrees.sum())],
                                       dtype=torch.float64)

    def counts(self) -> dict[str, float]:
        sums = self._sums.tolist()
        self._sums.zero_()
        return dict(zip(self.COUNT_NAMES, sums, strict=True))
