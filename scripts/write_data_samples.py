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
"""
import json
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


SAMPLES = {"openai_gsm8k_sample.parquet": openai_gsm8k, "verl_gsm8k_sample.parquet": verl_gsm8k,
           "skyrl_gsm8k_sample.parquet": skyrl_gsm8k, "dapo_math_sample.parquet": dapo_math}


def main(out_dir: Path = DATA) -> None:
    for name, build in SAMPLES.items():
        table = build()
        pq.write_table(table, out_dir / name)
        print(f"wrote {out_dir / name}: {table.num_rows} rows, columns {table.column_names}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
