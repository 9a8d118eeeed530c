"""The sync manifest: what a weight update delivered against what the engine expects.

A sync that drops, repeats or misnames a tensor would otherwise go unnoticed (a missing
tensor leaves stale weights; an unknown name is skipped by some loaders). Every engine
records each received (checkpoint name, shape) and, when the update finishes, checks it
here: missing names (full updates only), unexpected names, duplicates and shape mismatches
fail the update, naming a few of each. Pure Python, no torch.
"""
from collections import Counter
from collections.abc import Iterable, Mapping

SHOWN = 5


class SyncManifest:
    def __init__(self, expected: Mapping[str, tuple | None], *, who: str):
        self.expected = expected
        """{checkpoint name: shape, or None where the engine does not know it}."""
        self.who = who
        self.received: Counter = Counter()
        self.shape_mismatch: dict[str, tuple[tuple, tuple]] = {}

    def add(self, name: str, shape: Iterable[int] | None = None) -> bool:
        """Record one received tensor; True when the engine should load it (known, first time)."""
        self.received[name] += 1
        if name not in self.expected or self.received[name] > 1:
            return False
        want = self.expected[name]
        if shape is not None and want is not None and tuple(shape) != tuple(want):
            self.shape_mismatch[name] = (tuple(shape), tuple(want))
            return False
        return True

    def problems(self, *, full: bool) -> list[str]:
        out = []
        if full:
            missing = sorted(set(self.expected) - set(self.received))
            if missing:
                out.append(f"{len(missing)} missing (e.g. {missing[:SHOWN]})")
        unexpected = sorted(n for n in self.received if n not in self.expected)
        if unexpected:
            near = sorted(self.expected)[:3]
            out.append(f"{len(unexpected)} unexpected (e.g. {unexpected[:SHOWN]}; expected names such as {near})")
        duplicates = sorted(n for n, k in self.received.items() if k > 1)
        if duplicates:
            out.append(f"{len(duplicates)} received more than once (e.g. {duplicates[:SHOWN]})")
        if self.shape_mismatch:
            shown = [f"{n} got {g} expected {w}" for n, (g, w) in sorted(self.shape_mismatch.items())[:SHOWN]]
            out.append(f"{len(self.shape_mismatch)} with the wrong shape ({'; '.join(shown)})")
        return out

    def check(self, version: int, *, full: bool) -> None:
        """Raise naming what went wrong; `full`: every expected name must have arrived."""
        problems = self.problems(full=full)
        if problems:
            raise ValueError(f"{self.who}: weight update {version} does not match the engine's checkpoint names: "
                             + "; ".join(problems) + ". The trainer's stream and the engine's model disagree: "
                             "check that both load the same model.hf_path / model.arch.")
