"""A run rebuilt from one of its checkpoints, for `export` and `eval`: the folder checked, the
run's overrides read from its run directory (then the command line's), composed, planned and
checked as `validate` checks a run, before anything starts."""
import sys
from pathlib import Path

import yaml

RUN_OVERRIDES = "overrides.yaml"
"""What the run's start wrote into its run directory (driver/records/rundir.py write_run_files)."""


class CheckpointRunError(RuntimeError):
    """The command cannot run on this folder (not a complete checkpoint, no run config above
    it, an option the run cannot take): nothing was started or written."""


def check_checkpoint(checkpoint: Path) -> None:
    if not (checkpoint / "COMPLETE").is_file() or not (checkpoint / "trainer").is_dir():
        raise CheckpointRunError(f"{checkpoint} is not a complete training checkpoint (a step_N folder with "
                                 "COMPLETE and trainer/ in it)")


def run_overrides(checkpoint: Path) -> list[str]:
    """The overrides the run was started with, from the run directory above the checkpoint."""
    for folder in [checkpoint, *checkpoint.parents][:4]:
        if (folder / RUN_OVERRIDES).is_file():
            return list(yaml.safe_load((folder / RUN_OVERRIDES).read_text())["overrides"])
    raise CheckpointRunError(f"{checkpoint}: no {RUN_OVERRIDES} in it or the 3 folders above it (the run "
                             "directory `python -m launcher` wrote); use a checkpoint inside its run directory")


def rebuild_run(checkpoint: Path, extra: list[str], verb: str):
    """(composed, plan) of the run that wrote `checkpoint`, with `extra` overrides on top; None
    when the rules refuse it (the findings are on stderr, `refusing to <verb>: ...`)."""
    from launcher.config.compose import compose
    from launcher.validate import plan_and_check
    from launcher.validate.report import findings_text

    check_checkpoint(checkpoint)
    composed = compose(run_overrides(checkpoint) + extra)
    findings, plan = plan_and_check(composed)
    if any(f.severity == "error" for f in findings):
        sys.stderr.write(findings_text(findings, f"refusing to {verb}: "))
        return None
    return composed, plan
