"""Write the shipped parquet samples under data/ from the two jsonl samples there.

    .venv/bin/python scripts/write_data_samples.py          # rewrites data/*_sample.parquet

Each file has the layout of the public dataset it stands for, so recipes and tests exercise
the real column names and types (nothing may be downloaded here):

- openai_gsm8k_sample.parquet: openai/gsm8k (`question`, `answer` = worked solution ending
  in "#### n"); the same rows as gsm8k_sample.jsonl.
- verl_gsm8k_sample.parquet: verl's examples/data_preprocess/gsm8k.py output: data_source,
  prompt = [{role: user, content: question + " " + instruction}], ability, reward_model
  {style, ground_truth}, extra_info {split, index, answer, question}.
- skyrl_gsm8k_sample.parquet: SkyRL's examples/gsm8k/gsm8k_dataset.py output: the same
  prompt, env_class, reward_spec {method, ground_truth}, extra_info. (SkyRL's `reward_spec`
  in place of verl's `reward_model` is the only difference.)
- dapo_math_sample.parquet: BytedTsinghua-SIA/DAPO-Math-17k: data_source "math_dapo",
  prompt = [{content, role}] with DAPO's instruction around the problem, ability "MATH",
  reward_model {ground_truth, style}, extra_info {index: uuid}.
- copy_train.parquet / copy_val.parquet: the default recipe's task in verl's layout: copy
  one or two digits ("c57" -> "57", "c5." -> "5"), then end the turn. The answers differ in
  length, so the model must learn where to stop (EOS); the two files hold disjoint digit
  strings, so held-out accuracy measures copying, not recall.
"""
import json
import random
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

DATA = Path(__file__).resolve().parent.parent / "data"
GSM8K_INSTRUCTION = "Let's think step by step and output the final answer after \"####\"."


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def _gsm8k_solution(answer: str) -> str:
    """verl's extract_solution: the text after '#### ', commas removed."""
    return answer.split("#### ")[1].replace(",", "").strip()


def openai_gsm8k() -> pa.Table:
    rows = _jsonl("gsm8k_sample.jsonl")
    return pa.table({"question": [r["question"] for r in rows], "answer": [r["answer"] for r in rows]})


def _gsm8k_rows(reward_column: str, reward_spec: dict, extra: dict) -> pa.Table:
    rows = []
    for i, r in enumerate(_jsonl("gsm8k_sample.jsonl")):
        rows.append({"data_source": "openai/gsm8k",
                     "prompt": [{"role": "user", "content": r["question"] + " " + GSM8K_INSTRUCTION}],
                     **extra,
                     reward_column: {**reward_spec, "ground_truth": _gsm8k_solution(r["answer"])},
                     "extra_info": {"split": "train", "index": i, "answer": r["answer"], "question": r["question"]}})
    return pa.Table.from_pylist(rows)


def verl_gsm8k() -> pa.Table:
    return _gsm8k_rows("reward_model", {"style": "rule"}, {"ability": "math"})


def skyrl_gsm8k() -> pa.Table:
    return _gsm8k_rows("reward_spec", {"method": "rule"}, {"env_class": "gsm8k"})


def dapo_math() -> pa.Table:
    rows = []
    for i, r in enumerate(_jsonl("dapo_math_sample.jsonl")):
        rows.append({"data_source": "math_dapo", "prompt": [{"content": r["prompt"], "role": "user"}],
                     "ability": "MATH",
                     "reward_model": {"ground_truth": r["answer"], "style": "rule-lighteval/MATH_v2"},
                     "extra_info": {"index": str(uuid.uuid5(uuid.NAMESPACE_URL, f"dapo_math_sample/{i}"))}})
    return pa.Table.from_pylist(rows)


COPY_LENGTHS = (1, 2)
COPY_FILL = "."
"""Pads every prompt to two digits ("c5."), so the k-th answer token always copies the prompt
token three places back, and the end of the digits is a token the model can see. Three back
is inside the reach of KDA's short convolution (kernel 4): the tiny random-init model learns
it in ~150 steps, where the copy from four or more places back (three digits, or a "="
after them) took it over twice as many (measured, seed 0)."""
COPY_VAL_FRACTION = 0.2
COPY_TRAIN_ROWS = 1500


def _copy_strings(split: str) -> list[list[str]]:
    """Per length, the digit strings of `split`. Two-digit strings are split 80/20 (seeded), so
    train and val never share one; the ten one-digit strings are all training strings (two
    held out were too few to measure anything, and the only ones the model never saw alone)."""
    out = []
    for length in COPY_LENGTHS:
        strings = [str(i).zfill(length) for i in range(10**length)]
        random.Random(f"copy-split:{length}").shuffle(strings)
        cut = round(len(strings) * COPY_VAL_FRACTION) if length > 1 else 0
        out.append(strings[:cut] if split == "val" else strings[cut:])
    return [strings for strings in out if strings]


def copy_task(split: str) -> pa.Table:
    """Train: each row's length is drawn uniformly, then its string (one- and two-digit answers
    equally often, so where to stop is learnt for both). Val: each held-out string once."""
    by_length, rng = _copy_strings(split), random.Random(f"copy-rows:{split}")
    if split == "train":
        picked = [rng.choice(by_length[i % len(by_length)]) for i in range(COPY_TRAIN_ROWS)]
    else:
        picked = [s for strings in by_length for s in strings]
    rows = [{"data_source": "synthetic_copy",
             "prompt": [{"role": "user", "content": f"c{digits.ljust(max(COPY_LENGTHS), COPY_FILL)}"}],
             "ability": "copy", "reward_model": {"style": "rule", "ground_truth": digits},
             "extra_info": {"split": split, "index": i}} for i, digits in enumerate(picked)]
    rng.shuffle(rows)
    return pa.Table.from_pylist(rows)


SAMPLES = {"openai_gsm8k_sample.parquet": openai_gsm8k, "verl_gsm8k_sample.parquet": verl_gsm8k,
           "skyrl_gsm8k_sample.parquet": skyrl_gsm8k, "dapo_math_sample.parquet": dapo_math,
           "copy_train.parquet": lambda: copy_task("train"), "copy_val.parquet": lambda: copy_task("val")}


def main(out_dir: Path = DATA) -> None:
    for name, build in SAMPLES.items():
        table = build()
        pq.write_table(table, out_dir / name)
        print(f"wrote {out_dir / name}: {table.num_rows} rows, columns {table.column_names}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
