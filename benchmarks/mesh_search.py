"""Mesh-search throughput (candidates planned + validated per second, one process) and the
wall time of a 100-point `-m plan` sweep (every point composed by Hydra and validated).
Throughput is the best of 7 searches: one search takes 0.03-0.5 s, and on the shared 2-core
machine best-of-3 swung between 4,700 and 8,300 candidates/s from one run to the next.

    .venv/bin/python benchmarks/mesh_search.py

Target (issue 5): >= 5,000 candidate points per second on the 2-core machine.
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from launcher.config.compose import compose
from launcher.search import search

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["-m", "plan", "recipe=dapo_sync", "trainer.mesh.tp=1,2,4,8,16", "trainer.mesh.ep=1,2,4,8,16",
         "trainer.mesh.etp=1,2,4,8"]


def throughput(recipe: str, repeats: int = 7) -> tuple[int, int, float]:
    cfg = compose([f"recipe={recipe}"]).config
    search(cfg)  # warm the per-architecture caches once, as the CLI does on its first point
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = search(cfg)
        best = min(best, time.perf_counter() - start)
    return result.candidates, len(result.meshes), best


def sweep_wall() -> tuple[int, float]:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "launcher", *SWEEP, f"run.output_dir={out}"], cwd=ROOT,
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
    points = sum(line.startswith("  #") for line in proc.stdout.splitlines())
    return points, wall


def main() -> None:
    print(f"{'recipe':<12} {'candidates':>10} {'legal':>6} {'seconds':>8} {'points/s':>9}")
    for recipe in ("dapo_sync", "dapo_fullft", "gsm8k_grpo"):
        n, legal, secs = throughput(recipe)
        print(f"{recipe:<12} {n:>10} {legal:>6} {secs:>8.3f} {n / secs:>9,.0f}")
    points, wall = sweep_wall()
    print(f"\n-m plan sweep: {points} points composed + validated in {wall:.1f} s ({wall / points * 1e3:.0f} ms/point)")


if __name__ == "__main__":
    main()
