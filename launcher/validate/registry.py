"""One registry of rules: `@rule("MESH001")` registers a pure function (config, plan) -> findings.

Duplicate ids raise at import; every rule runs on every check, and all findings are
reported together (errors first) so a user fixes a config in one round.
"""
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from launcher.errors import Finding

RuleFn = Callable[..., Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    fn: RuleFn
    summary: str


RULES: dict[str, Rule] = {}


def rule(rule_id: str):
    def wrap(fn: RuleFn) -> RuleFn:
        if rule_id in RULES:
            raise ValueError(f"rule id {rule_id} registered twice ({RULES[rule_id].fn.__name__}, {fn.__name__})")
        RULES[rule_id] = Rule(rule_id, fn, (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")
        return fn

    return wrap


def error(rule_id: str, key: str, message: str, why: str, fix: str) -> Finding:
    return Finding(id=rule_id, severity="error", key=key, message=message, why=why, fix=fix)


def warning(rule_id: str, key: str, message: str, why: str, fix: str) -> Finding:
    return Finding(id=rule_id, severity="warning", key=key, message=message, why=why, fix=fix)
