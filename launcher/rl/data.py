"""Prompts in a deterministic order: problem i is a pure function of (seed, i).

A run's data position is one integer, saved in every checkpoint, so a resumed run draws
exactly the prompts an uninterrupted run would. File datasets are reshuffled each epoch
with a seed derived from (seed, epoch).
"""
import json
import random

from launcher._paths import resolve_data_path
from launcher.rl.tasks import TASKS, Problem, Task


def read_records(path: str) -> list[dict]:
    """Rows of a .jsonl or .parquet file as dicts."""
    file = resolve_data_path(path)
    if not file.exists():
        raise FileNotFoundError(f"data file {path} does not exist (data.train_path)")
    if file.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(file).to_pylist()
    if file.suffix in (".jsonl", ".json"):
        return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    raise ValueError(f"data.train_path={path}: expected a .jsonl or .parquet file")


def _problems_from_file(data_cfg, tokenizer) -> list[Problem]:
    records = read_records(data_cfg.train_path)
    for key in (data_cfg.prompt_key, data_cfg.answer_key):
        if records and key not in records[0]:
            raise KeyError(f"{data_cfg.train_path} has no column {key!r} (columns: {sorted(records[0])}); "
                           "set data.prompt_key / data.answer_key")
    problems = [Problem(str(r[data_cfg.prompt_key]), str(r[data_cfg.answer_key])) for r in records]
    kept = [p for p in problems if len(tokenizer.encode(p.prompt)) <= data_cfg.max_prompt_len]
    if not kept:
        raise ValueError(f"every prompt of {data_cfg.train_path} is longer than data.max_prompt_len="
                         f"{data_cfg.max_prompt_len} tokens")
    return kept


class PromptStream:
    """`take(position, n)`: the n problems starting at a data position."""

    def __init__(self, data_cfg, seed: int, tokenizer):
        self.task: Task = TASKS.get(data_cfg.task)
        self.seed = seed
        self.problems = None if data_cfg.train_path is None else _problems_from_file(data_cfg, tokenizer)
        if self.problems is None and self.task.generate is None:
            raise ValueError(f"data.task={data_cfg.task} needs data.train_path (only synthetic tasks generate problems)")
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.problems)))
            random.Random(f"{self.seed}:epoch{epoch}").shuffle(order)
            self._orders = {epoch: order}
        return self._orders[epoch]

    def problem(self, position: int) -> Problem:
        if self.problems is None:
            return self.task.generate(self.seed, position)
        epoch, offset = divmod(position, len(self.problems))
        return self.problems[self._order(epoch)[offset]]

    def take(self, position: int, n: int) -> list[Problem]:
        return [self.problem(position + i) for i in range(n)]
