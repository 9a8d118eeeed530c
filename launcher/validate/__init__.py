"""The validator: every rule over (config, plan), all findings at once, errors first.

Rules only read; derived numbers come from the plan. Importing this package loads the
rule modules (and nothing heavier than the standard library).
"""
from launcher.errors import Finding
from launcher.plan import make_plan
from launcher.validate import rules as _rules  # noqa: F401  (registers every rule)
from launcher.validate.registry import RULES
from launcher.validate.report import sort_findings

__all__ = ["RULES", "check", "plan_and_check"]


def check(cfg, plan) -> list[Finding]:
    findings: list[Finding] = []
    for r in RULES.values():
        findings.extend(r.fn(cfg, plan))
    return sort_findings(findings)


def plan_and_check(composed):
    """Plan (as far as it goes) and run every rule: (findings, plan or None)."""
    plan = make_plan(composed.config)
    return check(composed.config, plan), plan
