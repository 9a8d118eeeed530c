"""Issue 16: loading a DAPO-Math-sized parquet (1.8M rows) through launcher.driver.loop.data.

    PYTHONPATH=. .venv/bin/python benchmarks/data_load.py --out-dir /tmp/data_load [--rows 1791700] [--unique 17917]

Writes (once, cached in --out-dir) a parquet in DAPO-Math-17k's layout: `--unique` distinct
problems (prompt = one user message in DAPO's instruction wrapping, ~450 characters;
reward_model.ground_truth; data_source; extra_info.index) repeated to `--rows` rows, as the
public file repeats its 17,917 problems ~100 times. Then times, each in a fresh process
with an empty datasets cache (HF_DATASETS_CACHE under --out-dir):

- cold: load_dataset (parquet -> datasets' Arrow cache: arrow_s), then counting every
  formatted prompt's tokens (chat template of the tiny checkpoint fixture's tokenizer) and
  the length filter (count_and_filter_s);
- warm: the same again (datasets' cache holds the Arrow copy and the token counts);
- building one epoch's shuffled order, and drawing one step's 128 prompts from the table;
and the driver's peak RSS (VmHWM) of each. Nothing is shipped: the parquet stays in --out-dir.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = ("number triangle sum integer prime circle area ratio digits remainder probability sequence polynomial "
         "real positive largest smallest value product square cube root angle side length perimeter").split()


def write_parquet(path: Path, rows: int, unique: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT))
    from launcher.rl.prompts import DAPO_INSTRUCTION

    rng = random.Random(0)
    problems = [" ".join(rng.choice(WORDS) for _ in range(40)) + f" {i}?" for i in range(unique)]
    writer = None
    chunk = 100_000
    for start in range(0, rows, chunk):
        idx = [i % unique for i in range(start, min(rows, start + chunk))]
        table = pa.table({
            "data_source": ["math_dapo"] * len(idx),
            "prompt": [[{"content": DAPO_INSTRUCTION.replace("{prompt}", problems[i]), "role": "user"}] for i in idx],
            "ability": ["MATH"] * len(idx),
            "reward_model": [{"ground_truth": str(i % 997), "style": "rule-lighteval/MATH_v2"} for i in idx],
            "extra_info": [{"index": f"{i:08d}"} for i in idx],
        })
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


CHILD = r"""
import json, random, sys, time
t0 = time.monotonic()
from launcher.config.compose import compose
from launcher.driver.loop.data import PromptStream
from launcher.rl.tokenizer import HfTokenizer
cfg = compose(["recipe=dapo_sync", "data.train_path=" + sys.argv[1], "data.answer_key=reward_model.ground_truth"]).config
tok = HfTokenizer(sys.argv[2])
from pathlib import Path
from launcher.driver.loop.data import _load
ta = time.monotonic()
_load("parquet", Path(sys.argv[1]))  # parquet -> datasets' Arrow cache (the first time)
t1 = time.monotonic()
stream = PromptStream(cfg.data, 0, tok)
t2 = time.monotonic()
start = random.Random(0).randrange(3 * len(stream.problems), 4 * len(stream.problems) - 128)
t3 = time.monotonic()
stream.problem(start)  # the epoch's shuffled order, built once per epoch
t4 = time.monotonic()
problems = stream.take(start, 128)  # one step's prompts
t5 = time.monotonic()
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
r = stream.problems.report
print(json.dumps({"arrow_s": t1 - ta, "count_and_filter_s": t2 - t1, "imports_and_tokenizer_s": ta - t0,
                  "epoch_order_s": t4 - t3, "step_128_prompts_s": t5 - t4, "rows": r.rows, "kept": r.kept,
                  "too_long": r.too_long, "peak_rss_gib": hwm / 2**20, "answer0": problems[0].answer,
                  "prompt0_head": problems[0].prompt[:40]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", type=Path, default=Path("/tmp/data_load"))
    ap.add_argument("--rows", type=int, default=1_791_700)
    ap.add_argument("--unique", type=int, default=17_917)
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    parquet = args.out_dir / f"dapo_like_{args.rows}_{args.unique}.parquet"
    if not parquet.exists():
        started = time.monotonic()
        write_parquet(parquet, args.rows, args.unique)
        print(f"wrote {parquet} ({parquet.stat().st_size / 2**20:.0f} MiB) in {time.monotonic() - started:.0f} s")
    ckpt = args.out_dir / "tiny_checkpoint"
    if not (ckpt / "tokenizer.json").exists():
        sys.path.insert(0, str(ROOT))
        from launcher.workers.hf.tiny_checkpoint import build_tokenizer

        ckpt.mkdir(exist_ok=True)
        build_tokenizer(ckpt)
    cache = args.out_dir / f"hf_cache_{os.getpid()}"
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    for label in ("cold", "warm"):
        out = subprocess.run([sys.executable, "-c", CHILD, str(parquet), str(ckpt)], env=env, capture_output=True,
                             text=True, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        print(label, json.dumps(result))


if __name__ == "__main__":
    main()
