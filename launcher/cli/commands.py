"""`plan` and `run`, and the run directory's lock every command that writes takes. Each composes, checks
and plans before anything is started or written; `validate`, which writes nothing, is launcher/cli/validate.py."""
import os
import sys
from pathlib import Path

from launcher.cli.validate import has_error
from launcher.config.compose import Composed
from launcher.driver.records.rundir import RunDirLock, RunDirLocked, resolved_yaml, run_dir_of, write_run_files
from launcher.exit_codes import ExitCode
from launcher.validate import plan_and_check
from launcher.validate.report import findings_json, findings_text


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
    if has_error(findings):
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
    if has_error(findings):
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
