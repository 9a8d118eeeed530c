"""Rendering findings for people (text, errors first) and for tools (JSON contract)."""
import json

from launcher.errors import Finding
from launcher.secrets import mask_secrets

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER.get(f.severity, 9), f.id, f.key))


def findings_text(findings: list[Finding], title: str = "") -> str:
    """Errors first; each with what / why / fix."""
    findings = sort_findings(findings)
    errors = sum(f.severity == "error" for f in findings)
    warnings = sum(f.severity == "warning" for f in findings)
    head = f"{title}{errors} error(s), {warnings} warning(s)"
    lines = [head]
    for f in findings:
        lines.append(f"  [{f.severity.upper()} {f.id}] {f.key}: {f.message}")
        lines.append(f"      why: {f.why}")
        lines.append(f"      fix: {f.fix}")
    return "\n".join(lines) + "\n"


def findings_json(findings: list[Finding], plan: dict | None, data: dict | None = None) -> str:
    """{"ok", "findings", "plan" (when derived), "data" (the data pre-flight's summary, when a
    data file was sampled: `data`, else the `.data` that plan_and_check's findings carry)}."""
    data = data if data is not None else getattr(findings, "data", None)
    payload = {
        "ok": not any(f.severity == "error" for f in findings),
        "findings": [f.to_dict() for f in sort_findings(findings)],
    }
    if plan is not None:
        payload["plan"] = mask_secrets(plan)
    if data is not None:
        payload["data"] = data
    return json.dumps(payload, indent=2)
