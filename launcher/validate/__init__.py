"""The validator: every rule over (config, plan), all findings at once, errors first.

Rules only read; derived numbers come from the plan. Importing this package loads the
rule modules (and nothing heavier than the standard library; the data pre-flight reads
files with pyarrow, `tokenizers` and jinja2, never torch or transformers).
"""
from launcher.errors import Finding
from launcher.plan import make_plan
from launcher.validate import rules as _rules  # noqa: F401  (registers every rule)
from launcher.validate.registry import RULES
from launcher.validate.report import sort_findings

__all__ = ["RULES", "Findings", "check", "plan_and_check"]


class Findings(list):
    """plan_and_check's findings (errors first); `.data` is the data pre-flight's summary
    (validate/data_sample.py: rows sampled and prompt lengths per file), None without a data
    file. `validate --format json` carries it as "data"."""

    data: dict | None = None


def check(cfg, plan) -> list[Finding]:
    findings: list[Finding] = []
    for r in RULES.values():
        findings.extend(r.fn(cfg, plan))
    return sort_findings(findings)


def plan_and_check(composed):
    """Plan (as far as it goes) and run every rule: (findings, plan or None)."""
    from launcher.validate.data_sample import summary

    plan = make_plan(composed.config)
    findings = Findings(check(composed.config, plan))
    findings.data = summary(composed.config)
    return findings, plan
