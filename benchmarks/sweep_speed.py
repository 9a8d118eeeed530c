"""How fast a 1,000-point sweep is composed, validated and planned: before (Hydra composes every point)
and after (launcher/config/compose_points.py: Hydra once per set of group choices, value overrides on a copy).

    .venv/bin/python benchmarks/sweep_speed.py [--old-points 20]

Target (issue 18): 1,000 points in under 10 s on the 2-core machine. The old path (`compose` per
point, still what a single command uses) is timed on the first --old-points points and scaled to
the sweep; `-m validate` and `-m plan` run the whole sweep in a fresh process each, and `-m plan`
writes every legal point's run directory (config.yaml, overrides.yaml, plan.json) under a temp dir.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from launcher.cli.sweep import expand
from launcher.config.compose import compose
from launcher.config.compose_points import PointComposer
from launcher.errors import ConfigError
from launcher.validate import plan_and_check

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["recipe=dapo_sync", "trainer.mesh.tp=1,2,4,8", "trainer.mesh.ep=1,2,4,8,16",
         "algorithm.prompts_per_step=range(8,408,8)"]
"""4 x 5 x 50 = 1,000 points, legal and illegal meshes and batch sizes."""


def _timed_points(compose_point, points: list[list[str]]) -> tuple[float, float, float, int]:
    """(compose s, validate + plan s, CPU s, legal points) over `points`, in this process."""
    cpu, start, composed = time.process_time(), time.perf_counter(), []
    for point in points:
        try:
            composed.append(compose_point(point))
        except ConfigError:
            continue
    compose_s, legal = time.perf_counter() - start, 0
    start = time.perf_counter()
    for one in composed:
        findings, _ = plan_and_check(one)
        legal += not any(f.severity == "error" for f in findings)
    return compose_s, time.perf_counter() - start, time.process_time() - cpu, legal


def _cli_s(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of `python -m launcher ARGS` in a fresh process: CPU time is what a busy machine
    does not inflate (the 2-core machine is shared)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([sys.executable, "-m", "launcher", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-points", type=int, default=20, help="points timed on the old path (scaled to all)")
    old_n = parser.parse_args().old_points
    points = expand(SWEEP)
    composer = PointComposer()
    new = _timed_points(composer.compose, points)
    old = _timed_points(compose, points[:old_n])
    with tempfile.TemporaryDirectory() as runs:
        plan_s = _cli_s(["-m", "plan", *SWEEP, f"run.output_dir={runs}"])
        written = len(list(Path(runs).glob("*/sweep/*/plan.json")))
    validate_s = _cli_s(["-m", "validate", *SWEEP])
    rows = [(f"old: compose per point (first {old_n}, in process)", old_n, old[0] + old[1], old[2], old[:2]),
            ("new: PointComposer (in process)", len(points), new[0] + new[1], new[2], new[:2]),
            ("new: python -m launcher -m validate", len(points), *validate_s, None),
            (f"new: python -m launcher -m plan ({written} run dirs)", len(points), *plan_s, None)]
    print(f"sweep: {' '.join(SWEEP)}: {len(points)} points, {new[3]} legal, "
          f"{composer.hydra_compositions} Hydra composition(s) on the new path; load average {os.getloadavg()[0]:.1f}")
    print(f"{'path':<52} {'points':>6} {'wall s':>7} {'cpu s':>6} {'ms/point':>9} {'compose':>8} {'check':>6}")
    for name, n, wall, cpu, split in rows:
        stages = f"{split[0] / n * 1e3:>8.2f} {split[1] / n * 1e3:>6.2f}" if split else ""
        print(f"{name:<52} {n:>6} {wall:>7.2f} {cpu:>6.2f} {wall / n * 1e3:>9.2f} {stages}")
    print(f"old path scaled to {len(points)} points: {(old[0] + old[1]) / old_n * len(points):.1f} s wall")


if __name__ == "__main__":
    main()
