"""`validate`: compose, plan and check each point, print the findings; nothing is started or written.

The pre-commit hook's command, so its module imports only what checking needs: composition
(Hydra), the plan and the rules. The run directory (launcher/driver/records/rundir.py) and the commands
that write or start something stay in launcher/cli/commands.py; tests/unit/cli/test_validate_imports.py
keeps torch, Ray, vLLM, Megatron, transformers and the driver off this path.
"""
import sys
from pathlib import Path

from launcher.config.compose import compose
from launcher.config.files import available, in_root
from launcher.errors import ConfigError, Finding
from launcher.exit_codes import ExitCode
from launcher.validate import plan_and_check
from launcher.validate.report import findings_json, findings_text


def has_error(findings: list[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


def _all_recipes(roots: list[str]) -> list[str]:
    """--all's recipes: those of the --root folders when given (a team's, in pre-commit: the shipped
    ones are checked in the launcher's own CI), else every root's."""
    if not roots:
        return sorted(available("recipe"))
    return sorted({name for root in roots for name in in_root(Path(root).resolve(), "recipe")})


def cmd_validate(overrides: list[str], fmt: str, all_recipes: bool, roots: list[str]) -> int:
    points = [[f"recipe={r}"] + overrides for r in _all_recipes(roots)] if all_recipes else [overrides]
    if not points:  # a --root without recipes/ (a commit that touched only its clusters)
        sys.stdout.write("[]\n" if fmt == "json" else f"no recipes in {', '.join(roots)}: nothing to validate\n")
        return ExitCode.OK
    worst, outputs = ExitCode.OK, []
    for point in points:
        code, text = _validate_one(point, fmt)
        worst = max(worst, code)
        outputs.append(text)
    if fmt == "json" and all_recipes:
        sys.stdout.write("[\n" + ",\n".join(outputs) + "\n]\n")
    else:
        sys.stdout.write("".join(o if o.endswith("\n") else o + "\n" for o in outputs))
    return worst


def _validate_one(point: list[str], fmt: str) -> tuple[int, str]:
    label = " ".join(point) or "(defaults)"
    try:
        composed = compose(point)
    except ConfigError as err:
        text = findings_json(err.findings, None) if fmt == "json" else findings_text(err.findings, f"{label}: ")
        return ExitCode.CONFIG, text
    findings, plan = plan_and_check(composed)
    plan_dict = plan.to_dict() if plan.mesh_ok else None
    code = ExitCode.REFUSED if has_error(findings) else ExitCode.OK
    if fmt == "json":
        return code, findings_json(findings, plan_dict)
    return code, findings_text(findings, f"{label} [{composed.choices['recipe']} on {composed.choices['cluster']}]: ")
