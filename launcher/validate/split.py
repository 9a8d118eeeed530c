"""Checking many candidates that differ from one base config only under a few paths (mesh search).

A rule is a deterministic function of the values it reads. Run once on the base config
through views that raise on every varied path, a rule that finishes has read only values
all candidates share, so on any candidate it would take the same branches and yield the
same findings: those are computed once and reused, and only the other rules run per
candidate (a rule that looks at files, such as DATA002, sees them once per search). What a
rule reads is observed, not declared, so nothing goes stale when a rule changes. A view
exposes its object's dataclass fields only: a property or method, or using the object
whole (str, ==, isinstance), could read a varied path unseen, so those raise too.
"""
from collections.abc import Iterable
from dataclasses import dataclass

from launcher.errors import Finding
from launcher.validate.registry import RULES, Rule
from launcher.validate.report import sort_findings


class VariedRead(BaseException):
    """A rule run on the base config read a path that differs between candidates. A
    BaseException, so that no `except Exception` inside a rule can swallow it."""


class _View:
    """Read-only stand-in for a config or plan object on the way to a varied path."""

    __slots__ = ("_obj", "_path", "_varied", "_parents")

    def __init__(self, obj, path: str, varied: frozenset[str], parents: frozenset[str]):
        self._obj, self._path, self._varied, self._parents = obj, path, varied, parents

    def __getattr__(self, name: str):
        path = f"{self._path}.{name}"
        if path in self._varied or name not in self._obj.__dataclass_fields__:
            raise VariedRead(path)
        value = getattr(self._obj, name)
        return _View(value, path, self._varied, self._parents) if path in self._parents else value

    def _whole(self, *args):
        raise VariedRead(self._path)

    __eq__ = __ne__ = __hash__ = __bool__ = __str__ = __repr__ = __format__ = __iter__ = __len__ = _whole
    __class__ = property(_whole)  # isinstance() asks for it


@dataclass(frozen=True)
class SplitCheck:
    fixed_ids: tuple[str, ...]
    """Rules that read no varied path: run once, their findings reused for every candidate."""
    fixed: tuple[Finding, ...]
    per_candidate: tuple[Rule, ...]

    def check(self, cfg, plan) -> list[Finding]:
        """Exactly `launcher.validate.check(cfg, plan)` for a candidate of the base config."""
        findings = list(self.fixed)
        for r in self.per_candidate:
            findings.extend(r.fn(cfg, plan))
        return sort_findings(findings)


def _guarded(rule: Rule, cfg, plan) -> list[Finding] | None:
    """The rule's findings, or None when it read a varied path (or failed under the views:
    then it runs per candidate, where it behaves exactly as in a full check)."""
    try:
        return list(rule.fn(cfg, plan))
    except (VariedRead, Exception):  # noqa: BLE001 - any failure only means "not provably fixed"
        return None


def split_rules(cfg, plan, varied: Iterable[str], rules: Iterable[Rule] | None = None) -> SplitCheck:
    """`varied`: dotted paths from `cfg.` or `plan.` (e.g. `cfg.trainer.mesh`, `plan.memory`)
    under which candidates may differ from (cfg, plan)."""
    varied = frozenset(varied)
    parents = frozenset(p.rsplit(".", i)[0] for p in varied for i in range(1, p.count(".")))
    views = _View(cfg, "cfg", varied, parents), _View(plan, "plan", varied, parents)
    fixed_ids, fixed, per_candidate = [], [], []
    for r in RULES.values() if rules is None else rules:
        findings = _guarded(r, *views)
        if findings is None:
            per_candidate.append(r)
        else:
            fixed_ids.append(r.id)
            fixed.extend(findings)
    return SplitCheck(tuple(fixed_ids), tuple(fixed), tuple(per_candidate))
