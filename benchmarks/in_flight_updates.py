"""Async weight updates between chunks against in flight (inference.update_mode), in one run
of this script: tiny_dapo_async through `python -m launcher`, once per mode, with the same
seed and overrides, responses long enough for a tail (the random-init model stops at its EOS
id rarely, so lengths spread up to max_response_len). Prints per mode: the trainer's idle
time (wall time of the steps minus their train_s: waiting for groups and for the sync), the
sync time, staleness by group (oldest token) and by token, the sequences' version span, and
the groups dropped as too stale and the reward of the last steps.

    .venv/bin/python benchmarks/in_flight_updates.py [--steps 12] [--max-response-len 48]

Runs on this machine's CPUs (two logical nodes, one trainer rank and one hf engine).
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("between_chunks", "in_flight")


def run_mode(mode: str, out_dir: Path, args) -> list[dict]:
    overrides = ["recipe=tiny_dapo_async", f"inference.update_mode={mode}", f"run.steps={args.steps}",
                 f"run.output_dir={out_dir}", f"run.name={mode}", "checkpoint.every_steps=0",
                 f"algorithm.max_response_len={args.max_response_len}", *args.overrides]
    subprocess.run([sys.executable, "-m", "launcher", *overrides], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (out_dir / mode / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "reward" in r]


def summary(rows: list[dict], last: int) -> dict:
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
            "response_len": sum(r["response_len"] for r in rows) / n,
            "reward_last": sum(r["reward"] for r in rows[-last:]) / min(last, n)}


COLUMNS = [("wall_s", "{:.1f}"), ("idle_s", "{:.1f}"), ("idle_share", "{:.0%}"), ("sync_s", "{:.2f}"),
           ("staleness_mean", "{:.2f}"), ("token_staleness_mean", "{:.2f}"), ("version_span_mean", "{:.2f}"),
           ("version_span_max", "{}"), ("dropped_stale", "{}"), ("response_len", "{:.1f}"), ("reward_last", "{:.3f}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--max-response-len", type=int, default=48)
    parser.add_argument("--last", type=int, default=4, help="steps the reward column averages")
    parser.add_argument("overrides", nargs="*", help="more launcher overrides, for both modes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {mode: summary(run_mode(mode, Path(tmp), args), args.last) for mode in MODES}
    print("| mode | " + " | ".join(name for name, _ in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for mode, res in results.items():
        print(f"| {mode} | " + " | ".join(fmt.format(res[name]) for name, fmt in COLUMNS) + " |")


if __name__ == "__main__":
    main()
