"""Wall time of `validate` and `plan` in fresh processes, the share of it spent importing, and what they import.

    .venv/bin/python benchmarks/validate_speed.py              # 7 runs a command
    .venv/bin/python benchmarks/validate_speed.py --runs 15

Each run is a new interpreter, timed from outside (wall); inside, the probe times
`import launcher.__main__` (the imports before any work: what pre-commit pays on every commit)
and main() (composition, plan, rules, output, and the imports the work itself makes).
`python -c 'import yaml'` is timed alongside as a yardstick, so readings from machines of other
speeds compare. Targets: validate refusing a recipe < 0.3 s (issue 53), `plan recipe=dapo_async`
< 1 s, `validate --all` < 2 s (issues 2/3), none importing torch, ray, vllm, megatron or transformers.
Readings: docs/results.md#validate-refusing-a-recipe-fresh-process-issue-53-2026-12-07.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ray", "vllm", "megatron", "transformers")
PROBE = """import sys, time
start = time.perf_counter()
sys.argv = ['launcher'] + sys.argv[1:]
import launcher.__main__ as entry
imported = time.perf_counter()
code = entry.main()
import json
print(json.dumps({'code': code, 'import_s': imported - start, 'top_level': sorted({m.split('.')[0] for m in sys.modules})}),
      file=sys.stderr)
"""
REFUSED = ["recipe=tiny_grpo", "trainer.mesh.sequence_parallel=true"]
"""MESH008: sequence parallelism without tensor parallelism, an error the rules find after composition."""
ROWS = [  # name, arguments, the exit code it must give, target s
    ("validate, accepted", ["validate", "recipe=dapo_async"], 0, None),
    ("validate, refused", ["validate", *REFUSED], 1, 0.3),
    ("validate --all", ["validate", "--all"], None, 2.0),
    ("plan recipe=dapo_async", ["plan", "recipe=dapo_async", "run.output_dir=/tmp/bench_runs"], 0, 1.0),
]


def _wall(argv: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - start, out


def timed(args: list[str], code: int | None, runs: int) -> dict:
    walls, imports, heavy = [], [], []
    for _ in range(runs):
        wall, out = _wall([sys.executable, "-c", PROBE, *args])
        probe = json.loads(out.stderr.strip().splitlines()[-1])
        if code is not None and probe["code"] != code:
            raise SystemExit(f"`launcher {' '.join(args)}` exited {probe['code']}, not {code}:\n{out.stdout}{out.stderr}")
        walls.append(wall)
        imports.append(probe["import_s"])
        heavy = sorted(set(probe["top_level"]) & set(HEAVY))
    return {"median": statistics.median(walls), "min": min(walls), "max": max(walls),
            "import": statistics.median(imports), "heavy": heavy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per command (default 7)")
    runs = parser.parse_args().runs
    yardstick = statistics.median(_wall([sys.executable, "-c", "import yaml"])[0] for _ in range(3 * runs))
    print(f"{runs} fresh processes a command; `python -c 'import yaml'` {yardstick:.3f} s (median)")
    print(f"{'command':<24} {'median s':>8} {'min s':>6} {'max s':>6} {'imports s':>9} {'share':>6} "
          f"{'x yaml':>6} {'target s':>8}  heavy imports")
    for name, args, code, target in ROWS:
        t = timed(args, code, runs)
        print(f"{name:<24} {t['median']:>8.3f} {t['min']:>6.3f} {t['max']:>6.3f} {t['import']:>9.3f} "
              f"{t['import'] / t['median']:>6.0%} {t['median'] / yardstick:>6.1f} "
              f"{'-' if target is None else f'{target:.1f}':>8}  {t['heavy'] or 'none'}")


if __name__ == "__main__":
    main()
