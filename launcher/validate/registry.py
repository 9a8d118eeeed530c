"""The rules, in the one registry form (`launcher.registry.Registry`): `@rule("MESH001")`
registers a pure function (config, plan) -> drafts under its id.

A rule's id is written once, at registration: inside a rule `error(key, message, why, fix)`
and `warning(...)` make drafts without an id, and the registered function stamps the rule's
id on each, so a finding cannot carry another rule's id by a copy-paste slip. Duplicate ids
raise at import; every rule runs on every check, and all findings are reported together
(errors first) so a user fixes a config in one round.
"""
import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from launcher.errors import Finding
from launcher.registry import Registry


@dataclass(frozen=True, slots=True)
class Draft:
    """A finding before `@rule` stamps its rule's id on it."""

    severity: str
    key: str
    message: str
    why: str
    fix: str

    def stamped(self, rule_id: str) -> Finding:
        return Finding(id=rule_id, severity=self.severity, key=self.key, message=self.message, why=self.why,
                       fix=self.fix)


DraftFn = Callable[..., Iterable[Draft]]
RuleFn = Callable[..., Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    fn: RuleFn
    """(config, plan) -> findings, each with this rule's id."""


RULES: Registry[Rule] = Registry("rule id")


def rule(rule_id: str) -> Callable[[DraftFn], RuleFn]:
    """Registers the function as rule `rule_id`; the name it is defined under becomes the
    stamping function, so a direct call yields the same findings as a check."""

    def register(draft_fn: DraftFn) -> RuleFn:
        @functools.wraps(draft_fn)
        def stamped(cfg, plan) -> Iterator[Finding]:
            for draft in draft_fn(cfg, plan):
                yield draft.stamped(rule_id)

        RULES.register(rule_id)(Rule(rule_id, stamped))
        return stamped

    return register


def error(key: str, message: str, why: str, fix: str) -> Draft:
    return Draft(severity="error", key=key, message=message, why=why, fix=fix)


def warning(key: str, message: str, why: str, fix: str) -> Draft:
    return Draft(severity="warning", key=key, message=message, why=why, fix=fix)
