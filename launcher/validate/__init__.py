"""The validator: every rule over (config, plan), all findings at once, errors first.

Rules only read; derived numbers come from the plan. Importing this package loads the
rule modules (and nothing heavier than the standard library).
"""
from launcher.errors import Finding
from launcher.report import sort_findings
from launcher.validate import rules as _rules  # noqa: F401  (registers every rule)
from launcher.validate.registry import RULES

__all__ = ["check", "RULES"]


def check(cfg, plan) -> list[Finding]:
    findings: list[Finding] = []
    for r in RULES.values():
        findings.extend(r.fn(cfg, plan))
    return sort_findings(findings)
