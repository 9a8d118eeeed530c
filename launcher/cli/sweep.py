"""Hydra multirun (`-m`): expand the sweep, compose and validate every point in the driver,
list the illegal points with their first error, then plan (or run) only the legal ones.

Expansion uses Hydra's own override parser and BasicSweeper, so `a=1,2 b=range(1,4)`
means what it means in any Hydra app. One PointComposer composes all points
(launcher/config/compose_points.py: Hydra once per set of group choices, ~2 ms a point after that,
the same config and findings as a full compose). A `plan` sweep starts no Ray.
"""
import json
import sys
from dataclasses import dataclass, field

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from launcher.cli.args import Args, UsageError
from launcher.cli.commands import take_run_dir_lock
from launcher.config.compose_points import PointComposer
from launcher.driver.records.rundir import run_dir_of, write_run_files
from launcher.errors import ConfigError
from launcher.exit_codes import ExitCode
from launcher.validate import plan_and_check


@dataclass
class SweepPoint:
    index: int
    overrides: list[str]
    status: str = "legal"
    first_error: str = ""
    numbers: dict = field(default_factory=dict)


def expand(overrides: list[str]) -> list[list[str]]:
    """The sweep's points, each a list of plain overrides, in Hydra's BasicSweeper order."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as exc:  # noqa: BLE001 - Hydra raises several parse error types
        raise UsageError(f"cannot parse sweep overrides: {exc}") from None
    return [point for batch in BasicSweeper.split_arguments(parsed, None) for point in batch]


def evaluate(index: int, overrides: list[str], composer: PointComposer):
    """Compose, validate and plan one point: (SweepPoint, Composed, Plan), the last two None unless legal.

    One `composer` for all points of a sweep, so Hydra composes each set of group choices once."""
    point = SweepPoint(index, overrides)
    try:
        composed = composer.compose(overrides)
    except ConfigError as err:
        f = err.findings[0]
        point.status, point.first_error = "invalid", f"{f.id} {f.key}: {f.message}"
        return point, None, None
    findings, plan = plan_and_check(composed)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        point.status, point.first_error = "illegal", f"{errors[0].id} {errors[0].key}: {errors[0].message}"
        return point, None, None
    mem = plan.memory
    point.numbers = {"dp": plan.mesh.dp, "edp": plan.mesh.edp, "trainer_gib": round(mem.trainer.total_gib, 1),
                     "peak_gib": round(mem.colocated.peak_gib if mem.colocated else mem.trainer.total_gib, 1),
                     "sequences_per_step": plan.batch.sequences_per_step}
    return point, composed, plan


def _summary(points: list[SweepPoint]) -> str:
    lines = [f"sweep: {sum(p.status == 'legal' for p in points)} legal of {len(points)} points"]
    for p in points:
        detail = " ".join(f"{k}={v}" for k, v in p.numbers.items()) if p.status == "legal" else p.first_error
        lines.append(f"  #{p.index:<3} {p.status:<8} {' '.join(p.overrides)} | {detail}")
    return "\n".join(lines) + "\n"


def cmd_sweep(args: Args) -> int:
    if args.command not in ("plan", "run", "validate"):
        raise UsageError(f"-m works with plan, run or validate, not `{args.command}`")
    composer = PointComposer()
    results = [evaluate(i, point, composer) for i, point in enumerate(expand(args.overrides))]
    points = [p for p, _, _ in results]
    legal = [(p, c, plan) for p, c, plan in results if c is not None]
    if args.command == "plan":
        for p, composed, plan in legal:
            lock = take_run_dir_lock(run_dir_of(composed, f"sweep/{p.index}"))
            if lock is None:
                p.status, p.first_error = "locked", "run directory in use by a live run"
                continue
            with lock:
                p.numbers["run_dir"] = str(write_run_files(composed, plan.to_dict(), suffix=f"sweep/{p.index}"))
    if args.format == "json":
        sys.stdout.write(json.dumps({"points": [vars(p) for p in points]}, indent=2) + "\n")
    else:
        sys.stdout.write(_summary(points))
    if args.command == "run":
        from launcher.driver.launch import launch

        for p, composed, plan in legal:  # one lock per point, held for that point's run only
            lock = take_run_dir_lock(run_dir_of(composed, f"sweep/{p.index}"))
            if lock is None:
                return ExitCode.REFUSED
            with lock:
                run_dir = write_run_files(composed, plan.to_dict(), suffix=f"sweep/{p.index}")
                if launch(composed, plan, run_dir) != ExitCode.OK:
                    return ExitCode.REFUSED
    locked = any(p.status == "locked" for p in points)
    return ExitCode.OK if legal and not locked else ExitCode.REFUSED
