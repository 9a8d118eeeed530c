"""The subcommands. Each composes, checks and plans before anything is started or written."""
import os
import sys
from pathlib import Path

from launcher.config.compose import Composed, compose
from launcher.config.files import available, in_root
from launcher.driver.rundir import RunDirLock, RunDirLocked, resolved_yaml, run_dir_of, write_run_files
from launcher.errors import ConfigError, Finding
from launcher.exit_codes import ExitCode
from launcher.validate import plan_and_check
from launcher.validate.report import findings_json, findings_text


def _has_error(findings: list[Finding]) -> bool:
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
    code = ExitCode.REFUSED if _has_error(findings) else ExitCode.OK
    if fmt == "json":
        return code, findings_json(findings, plan_dict)
    return code, findings_text(findings, f"{label} [{composed.choices['recipe']} on {composed.choices['cluster']}]: ")


def cmd_plan(composed: Composed, fmt: str, keep: list[str]) -> int:
    from launcher.plan.render import plan_tables
    from launcher.plan.replan import replan_keeping

    findings, plan = plan_and_check(composed)
    if keep:
        composed, findings, plan = replan_keeping(composed, keep, plan_and_check)
    if fmt == "json":
        sys.stdout.write(findings_json(findings, plan.to_dict()) + "\n")
    else:
        sys.stdout.write("# resolved config\n" + resolved_yaml(composed) + "\n")
        sys.stdout.write(plan_tables(plan) + "\n")
        sys.stdout.write(findings_text(findings, "validation: "))
    if _has_error(findings):
        return ExitCode.REFUSED
    lock = take_run_dir_lock(run_dir_of(composed))
    if lock is None:
        return ExitCode.REFUSED
    with lock:
        run_dir = write_run_files(composed, plan.to_dict())
    sys.stderr.write(f"wrote {Path(run_dir) / 'config.yaml'}, overrides.yaml, plan.json\n")
    return ExitCode.OK


def cmd_run(composed: Composed) -> int:
    findings, plan = plan_and_check(composed)
    if _has_error(findings):
        sys.stderr.write(findings_text(findings, "refusing to start: "))
        return ExitCode.REFUSED
    if findings:
        sys.stderr.write(findings_text(findings, "starting with "))
    lock = take_run_dir_lock(run_dir_of(composed))  # before Ray is even imported: a refusal is instant
    if lock is None:
        return ExitCode.REFUSED
    with lock:
        from launcher.driver.launch import launch

        run_dir = write_run_files(composed, plan.to_dict())
        return launch(composed, plan, run_dir)


def take_run_dir_lock(run_dir: Path) -> RunDirLock | None:
    """The run directory's lock, or None (with the holder named on stderr) when a live run holds it."""
    try:
        return RunDirLock(run_dir).acquire()
    except RunDirLocked as err:
        sys.stderr.write(f"refusing to start: {err}\n")
        return None


def write_beside_plan(composed: Composed, plan, name: str, text: str) -> Path | None:
    """The run's config and plan files, and `text` as <run dir>/<name> (sbatch.sh, rayjob.yaml),
    written under the run directory's lock; None when a live run holds it (named on stderr)."""
    run_dir = Path(os.path.abspath(run_dir_of(composed)))
    lock = take_run_dir_lock(run_dir)
    if lock is None:
        return None
    with lock:
        write_run_files(composed, plan.to_dict())
        (run_dir / name).write_text(text)
    return run_dir / name
