"""Where a step's time goes on the tiny recipe: generation, training, everything else.

"Everything else" is orchestration (Ray calls, sleep/wake, offload), weight sync, data,
rewards, batching, logging and checkpoints: the launcher's own cost. Target: < 15%.

    .venv/bin/python benchmarks/overhead.py                          # tiny_grpo, 40 steps
    .venv/bin/python benchmarks/overhead.py recipe=tiny_dapo_async run.steps=30

Runs `python -m launcher` with the given overrides into a temporary folder, reads its
metrics.jsonl and prints mean seconds per step and shares, skipping warm-up steps.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WARMUP_STEPS = 3


def _phases(m: dict) -> dict[str, float]:
    """Seconds of one step by phase. Async: generation overlaps training, so the step's
    wall time splits into waiting for samples, training and the rest."""
    if "staleness_max" in m:
        generation = m["rollout_s"]
    else:
        generation = m["gen_s"]
    return {"generation": generation, "training": m["train_s"], "weight sync": m["sync_s"],
            "other (orchestration, data, rewards, logs, checkpoints)": m["step_s"] - generation - m["train_s"]
            - m["sync_s"]}


def table(metrics: list[dict]) -> str:
    steady = metrics[WARMUP_STEPS:] or metrics
    sums: dict[str, float] = {}
    for m in steady:
        for phase, seconds in _phases(m).items():
            sums[phase] = sums.get(phase, 0.0) + seconds
    total = sum(m["step_s"] for m in steady)
    lines = [f"{len(steady)} steps after {WARMUP_STEPS} warm-up, {total / len(steady):.3f} s per step", "",
             f"{'phase':<58}{'s/step':>8}{'share':>8}"]
    for phase, seconds in sums.items():
        lines.append(f"{phase:<58}{seconds / len(steady):>8.3f}{seconds / total:>8.1%}")
    outside = 1 - (sums["generation"] + sums["training"]) / total
    lines += ["", f"outside generation + training: {outside:.1%} (target < 15%)"]
    return "\n".join(lines)


def main(overrides: list[str]) -> int:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "launcher", "run.name=overhead", f"run.output_dir={out}", "run.steps=40",
               "checkpoint.every_steps=0", *overrides]
        code = subprocess.run(cmd, cwd=ROOT).returncode
        if code != 0:
            return code
        rows = (Path(out) / "overhead" / "metrics.jsonl").read_text().splitlines()
        steps = [row for row in map(json.loads, rows) if "step_s" in row]  # eval rows have no step timings
        print(table(steps))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
