"""Wall time of `validate --all` and `plan` in fresh processes, and what they import.

    .venv/bin/python benchmarks/validate_speed.py

Targets (issue 2/3): `plan recipe=dapo_async` < 1 s, `validate --all` < 2 s on the 2-core
machine, neither importing torch, ray, vllm or megatron.
"""
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ray", "vllm", "megatron")
PROBE = ("import sys, runpy; sys.argv = ['launcher'] + sys.argv[1:]\n"
         "try:\n    runpy.run_module('launcher', run_name='__main__')\nexcept SystemExit:\n    pass\n"
         "import json; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(%r))), file=sys.stderr)")


def timed(args: list[str], repeats: int = 5) -> tuple[float, float, list[str]]:
    walls, heavy = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", PROBE % (HEAVY,), *args], cwd=ROOT, capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        heavy = json.loads(out.stderr.strip().splitlines()[-1])
    return statistics.median(walls), max(walls), heavy


def main() -> None:
    rows = [("validate --all", ["validate", "--all"], 2.0),
            ("plan recipe=dapo_async", ["plan", "recipe=dapo_async", "run.output_dir=/tmp/bench_runs"], 1.0)]
    print(f"{'command':<26} {'median s':>9} {'max s':>7} {'target s':>9}  heavy imports")
    for name, args, target in rows:
        median, worst, heavy = timed(args)
        print(f"{name:<26} {median:>9.2f} {worst:>7.2f} {target:>9.1f}  {heavy or 'none'}")


if __name__ == "__main__":
    main()
