"""Async weight updates between chunks against in flight (inference.update_mode), in one run
of this script: tiny_dapo_async through `python -m launcher`, once per mode, with the same
seed and overrides. Prints per mode: the trainer's idle time (wall time of the steps minus
their train_s: waiting for groups and for the sync), the sync time, staleness by group
(oldest token) and by token, the sequences' version span, the groups dropped as too stale;
then the reward curve of both modes at equal steps (mean reward per block of steps, and of
the last steps), the one comparison that says whether in-flight updates learn as well.

    .venv/bin/python benchmarks/in_flight_updates.py [--steps 12] [--max-response-len 48] [--out rows.json]

The default max_response_len 48 gives a tail (the random-init model stops at its EOS id
rarely, so lengths spread up to it) but a flat reward (the copy task's 2 characters over ~35
generated); with --max-response-len 2 (the recipe's own) or 8 (the model must also learn to
stop) it rises to 0.78-0.98 by steps 111-120 (docs/results.md).
Runs on this machine's CPUs (two logical nodes, one trainer rank and one hf engine).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("between_chunks", "in_flight")


def run_mode(mode: str, out_dir: Path, args) -> list[dict]:
    """The mode's step rows (metrics.jsonl without its start-up and evaluation rows)."""
    overrides = ["recipe=tiny_dapo_async", f"inference.update_mode={mode}", f"run.steps={args.steps}",
                 f"run.output_dir={out_dir}", f"run.name={mode}", "checkpoint.every_steps=0",
                 f"algorithm.max_response_len={args.max_response_len}", *args.overrides]
    subprocess.run([sys.executable, "-m", "launcher", *overrides], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (out_dir / mode / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "reward" in r]


def _per_sample(rows: list[dict], key: str) -> float:
    """`key` over every sample the rows' steps generated: a step row's reward and length are
    means over its newly generated groups (launcher/driver/loop/step.py generation_summary), so rows
    weigh by their groups (each of algorithm.samples_per_prompt samples); a step that trained
    on queued groups while none finished has null there and weighs nothing; nan when no row
    generated a group."""
    have = [r for r in rows if r[key] is not None]
    groups = sum(r["groups_generated"] for r in have)
    return sum(r[key] * r["groups_generated"] for r in have) / groups if groups else float("nan")


def summary(rows: list[dict]) -> dict:
    n = len(rows)
    wall = sum(r["step_s"] for r in rows)
    train = sum(r["train_s"] for r in rows)
    return {"steps": n, "wall_s": wall, "train_s": train, "idle_s": wall - train, "idle_share": (wall - train) / wall,
            "sync_s": sum(r["sync_s"] for r in rows) / n,
            "staleness_mean": sum(r["staleness_mean"] for r in rows) / n,
            "token_staleness_mean": sum(r["token_staleness_mean"] for r in rows) / n,
            "version_span_mean": sum(r["version_span_mean"] for r in rows) / n,
            "version_span_max": max(r["version_span_max"] for r in rows),
            "dropped_stale": sum(r["dropped_stale"] for r in rows),
            "response_len": _per_sample(rows, "response_len")}


def reward_curve(rows: list[dict], block: int, last: int) -> dict[str, float]:
    """Mean reward of the samples generated in each `block` steps, keyed by their step range
    (`1-10`), then `last N`: both modes run the same steps, so their curves line up key by key."""
    curve = {}
    for start in range(0, len(rows), block):
        part = rows[start:start + block]
        curve[f"{part[0]['step']}-{part[-1]['step']}"] = _per_sample(part, "reward")
    curve[f"last {min(last, len(rows))}"] = _per_sample(rows[-last:], "reward")
    return curve


COLUMNS = [("wall_s", "{:.1f}"), ("idle_s", "{:.1f}"), ("idle_share", "{:.0%}"), ("sync_s", "{:.2f}"),
           ("staleness_mean", "{:.2f}"), ("token_staleness_mean", "{:.2f}"), ("version_span_mean", "{:.2f}"),
           ("version_span_max", "{}"), ("dropped_stale", "{}"), ("response_len", "{:.1f}")]


def tables(results: dict[str, dict], curves: dict[str, dict[str, float]]) -> str:
    """The per-mode table, then the reward curves side by side (`-` where a mode has no such steps)."""
    lines = ["| mode | " + " | ".join(name for name, _ in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += [f"| {mode} | " + " | ".join(fmt.format(res[name]) for name, fmt in COLUMNS) + " |"
              for mode, res in results.items()]
    lines += ["", "| reward, steps | " + " | ".join(curves) + " |", "|---" * (len(curves) + 1) + "|"]
    keys = list(dict.fromkeys(key for curve in curves.values() for key in curve))
    for key in keys:
        cells = [f"{curve[key]:.3f}" if key in curve else "-" for curve in curves.values()]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--max-response-len", type=int, default=48)
    parser.add_argument("--block", type=int, default=4, help="steps per point of the reward curve")
    parser.add_argument("--last", type=int, default=4, help="steps the curve's last row averages")
    parser.add_argument("--out", type=Path, help="a JSON file for every step row of both modes, the tables' numbers "
                                                 "and the load average")
    parser.add_argument("overrides", nargs="*", help="more launcher overrides, for both modes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = {mode: run_mode(mode, Path(tmp), args) for mode in MODES}
    results = {mode: summary(r) for mode, r in rows.items()}
    curves = {mode: reward_curve(r, args.block, args.last) for mode, r in rows.items()}
    load = os.getloadavg()
    print(tables(results, curves))
    print(f"\nload average at the end (1, 5, 15 min): {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}")
    if args.out is not None:
        args.out.write_text(json.dumps({"argv": sys.argv[1:], "load_average": load, "summary": results,
                                        "reward_curve": curves, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
