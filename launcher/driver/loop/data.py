"""Prompts in a deterministic order: problem i is a pure function of (seed, i).

A run's data position is one integer, saved in every checkpoint, so a resumed run draws
exactly the prompts an uninterrupted run would. File datasets are reshuffled each epoch
with a seed derived from (seed, epoch).

Files (.jsonl, .json, .parquet) are read with HF `datasets` from local paths only and stay
an Arrow table on disk (datasets' cache, memory-mapped): rows become Python objects only
when a batch draws them. Formatting (prompts.py) and token counting run once, batched and
in worker processes for large files, and are cached by datasets under a key of the file,
the keys, the formatting and the tokenizer, so a resumed run does not count again.
Columns may be nested (`data.answer_key=reward_model.ground_truth`). A bad row (malformed
JSON line, prompt or answer missing, null or mistyped) is named by file and row and refused
or skipped as data.bad_rows says.
"""
import hashlib
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from launcher.config.schema.choices import BadRows
from launcher.json_lines import json_lines
from launcher.paths import resolve_data_path
from launcher.rl.prompt_rows import describe_formatting, dig, measure_rows, split_key
from launcher.rl.prompts import PromptFormatter, reference_answer
from launcher.rl.tasks import TASKS, Problem, Task

BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
# Bump when _Measure's output for the same input changes (invalidates cached token counts).
_MEASURE_VERSION = 2
_BATCH_ROWS = 1000
# Worker processes only pay off past their start-up cost (~1 s each).
_PARALLEL_FROM_ROWS = 50_000
_LISTED_BAD_ROWS = 20


class DataError(ValueError):
    """A data file that cannot be trained on as configured; the message names file and rows."""


@dataclass
class LoadReport:
    key: str
    """data.train_path or data.val_path."""
    path: str
    rows: int
    kept: int
    too_long: int
    max_prompt_len: int
    bad: list[str] = field(default_factory=list)
    """'file:line: why' of each bad row (all of them)."""
    formatting: str = ""
    seconds: float = 0.0

    def summary(self) -> str:
        text = (f"{self.key}={self.path}: kept {self.kept:,} of {self.rows:,} prompts; {self.too_long:,} longer than "
                f"data.max_prompt_len={self.max_prompt_len} tokens ({self.formatting})")
        if self.bad:
            text += f"; {len(self.bad):,} bad rows skipped (data.bad_rows=skip): " + "; ".join(self.bad[:5])
            text += " ..." if len(self.bad) > 5 else ""
        return text + f" [{self.seconds:.1f} s]"


# ---- reading a file into an Arrow-backed dataset ----------------------------------------------


def data_file(path: str, key: str = "data.train_path") -> Path:
    file = resolve_data_path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{key}={path} does not exist (looked at {file})")
    if file.suffix not in BUILDERS:
        raise DataError(f"{key}={path}: expected a .jsonl, .json or .parquet file")
    return file


def _load(builder: str, file: Path):
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local files only: never look for a hub dataset
    import datasets

    datasets.disable_progress_bars()
    return datasets.load_dataset(builder, data_files=str(file), split="train")


def _rows_of_lines(file: Path, skip_lines: set[int] | None = None) -> list[int]:
    """1-based line number of each row of a JSON-lines file (blank lines hold no row)."""
    with open(file, encoding="utf-8") as f:
        return [n for n, line in enumerate(f, 1) if line.strip() and n not in (skip_lines or ())]


def _malformed_lines(file: Path) -> list[tuple[int, str]]:
    """(line, why) of each line of a JSON-lines file that holds no row, read as the pre-flight reads it."""
    return [(line.number, line.bad) for line in json_lines(file) if line.bad]


class _Table:
    """The loaded dataset and how its rows are named in messages."""

    def __init__(self, file: Path, shown: str):
        self.file, self.shown = file, shown
        self.bad_lines: list[tuple[int, str]] = []
        self._lines: list[int] | None = None
        try:
            self.dataset = _load(BUILDERS[file.suffix], file)
        except Exception as err:  # datasets wraps pyarrow's parse errors in DatasetGenerationError
            if file.suffix != ".jsonl":
                raise DataError(f"{shown}: cannot be read as {BUILDERS[file.suffix]}: {_cause(err)}") from err
            self.bad_lines = _malformed_lines(file)
            if not self.bad_lines:
                raise DataError(f"{shown}: cannot be read as JSON lines: {_cause(err)} (every line parses on its "
                                "own: a column changes type between rows?)") from err
            self.dataset = self._load_without_bad_lines()

    def _load_without_bad_lines(self):
        skip = {n for n, _ in self.bad_lines}
        with tempfile.TemporaryDirectory(prefix="launcher-data-") as tmp:
            clean = Path(tmp) / self.file.name
            with open(self.file, encoding="utf-8", errors="replace") as src, open(clean, "w", encoding="utf-8") as dst:
                dst.writelines(line for n, line in enumerate(src, 1) if n not in skip)
            dataset = _load("json", clean)  # the Arrow cache is written now; the text copy can go
        self._lines = _rows_of_lines(self.file, skip)
        return dataset

    def where(self, row: int) -> str:
        """`file:line` (JSON lines, 1-based) or `file row i` (0-based) of dataset row `row`."""
        if self.file.suffix == ".jsonl":
            if self._lines is None:
                self._lines = _rows_of_lines(self.file)
            return f"{self.shown}:{self._lines[row]}"
        return f"{self.shown} row {row}"


def _cause(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    return f"{type(err).__name__}: {err}"


# ---- columns ------------------------------------------------------------------------------------


def _dotted_columns(features, prefix: str = "") -> list[str]:
    out = []
    for name, feature in features.items():
        out.append(prefix + name)
        if isinstance(feature, dict):
            out += _dotted_columns(feature, prefix + name + ".")
    return out


def key_path(dataset, key: str, option: str, shown: str) -> tuple[str, list[str]]:
    """(top-level column, fields inside it) of a possibly dotted key; a column whose own name
    holds dots wins over nesting."""
    found = split_key(dataset.column_names, key)
    if found is not None:
        column, fields = found
        feature, walked = dataset.features[column], column
        for name in fields:
            if not isinstance(feature, dict) or name not in feature:
                raise KeyError(f"{shown}: column {walked} has no field {name!r} (columns: "
                               f"{_dotted_columns(dataset.features)[:30]}); set {option}")
            feature, walked = feature[name], f"{walked}.{name}"
        return column, fields
    raise KeyError(f"{shown} has no column {key!r} (columns: {_dotted_columns(dataset.features)[:30]}); set {option} "
                   "(dotted for a nested field, e.g. reward_model.ground_truth)")


class _Measure:
    """datasets.map function: per row, the formatted prompt's token count and why it is bad
    ("" when it is not): rl.prompt_rows.measure_rows, the function validate's pre-flight runs
    on a file's first rows. Picklable: runs in datasets' worker processes."""

    def __init__(self, prompt: tuple[str, list[str]], answer: tuple[str, list[str]], formatter, task: str):
        self.prompt, self.answer, self.formatter, self.task = prompt, answer, formatter, task
        self._memo: dict = {}
        """prompt value's key -> token count of its formatted text (across batches)."""

    def __getstate__(self):
        return {**self.__dict__, "_memo": {}}

    def __call__(self, *columns) -> dict:
        by_name = dict(zip(dict.fromkeys([self.prompt[0], self.answer[0]]), columns, strict=True))
        tokens, bad = measure_rows(self.formatter, self.task, self.prompt[1], self.answer[1], by_name[self.prompt[0]],
                                   by_name[self.answer[0]], self._memo)
        return {"__tokens": tokens, "__bad": bad}


# ---- problems -----------------------------------------------------------------------------------


class ProblemTable(Sequence):
    """The kept rows of one file as Problems, in file order, built when indexed."""

    def __init__(self, dataset, kept, prompt, answer, formatter, task: str, report: LoadReport):
        self.dataset, self.kept, self.report = dataset, kept, report
        self._prompt, self._answer, self._formatter, self._task = prompt, answer, formatter, task
        names = dataset.column_names
        self._extra = [c for c in ("data_source", "extra_info") if c in names]

    def __len__(self) -> int:
        return len(self.kept)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        row = self.dataset[int(self.kept[i])]
        data_source = row.get("data_source")
        extra_info = row.get("extra_info")
        return Problem(prompt=self._formatter.format(dig(row[self._prompt[0]], self._prompt[1], "prompt")),
                       answer=reference_answer(self._task, dig(row[self._answer[0]], self._answer[1], "answer")),
                       data_source=None if data_source is None else str(data_source),
                       extra_info=extra_info if isinstance(extra_info, dict) else None)


def _num_proc(rows: int) -> int | None:
    if rows < _PARALLEL_FROM_ROWS:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 16))


def load_problems(data_cfg, tokenizer, path: str, key: str = "data.train_path") -> ProblemTable:
    """Rows of `path` that are well-formed and whose formatted prompt fits data.max_prompt_len.

    Raises FileNotFoundError, KeyError (a named column is missing) or DataError (bad rows
    under data.bad_rows=error, or no prompt left)."""
    import numpy as np

    started = time.monotonic()
    file = data_file(path, key)
    table = _Table(file, path)
    dataset = table.dataset
    prompt = key_path(dataset, data_cfg.prompt_key, "data.prompt_key", path)
    answer = key_path(dataset, data_cfg.answer_key, "data.answer_key", path)
    formatter = PromptFormatter(data_cfg, tokenizer)
    measure = _Measure(prompt, answer, formatter, data_cfg.task)
    fingerprint = hashlib.sha256(repr((dataset._fingerprint, prompt, answer, data_cfg.task, formatter.identity,
                                       _MEASURE_VERSION)).encode()).hexdigest()[:32]
    measured = dataset.map(measure, batched=True, batch_size=_BATCH_ROWS, input_columns=list(dict.fromkeys(
        [prompt[0], answer[0]])), remove_columns=dataset.column_names, num_proc=_num_proc(len(dataset)),
        new_fingerprint=fingerprint, desc=f"counting prompt tokens of {path}")
    arrow = measured.data.table
    tokens = arrow.column("__tokens").to_numpy()
    bad_reason = arrow.column("__bad").to_numpy(zero_copy_only=False)
    bad_rows = np.flatnonzero(bad_reason != "")
    bad = [f"{path}:{n}: {reason}" for n, reason in table.bad_lines]
    bad += [f"{table.where(int(r))}: {bad_reason[r]}" for r in bad_rows]
    ok = bad_reason == ""
    fits = ok & (tokens <= data_cfg.max_prompt_len)
    report = LoadReport(key=key, path=path, rows=len(dataset) + len(table.bad_lines), kept=int(fits.sum()),
                        too_long=int((ok & ~fits).sum()), max_prompt_len=data_cfg.max_prompt_len, bad=bad,
                        formatting=describe_formatting(formatter, data_cfg), seconds=time.monotonic() - started)
    _check(report, data_cfg)
    return ProblemTable(dataset, np.flatnonzero(fits), prompt, answer, formatter, data_cfg.task, report)


def _check(report: LoadReport, data_cfg) -> None:
    mode = BadRows(getattr(data_cfg.bad_rows, "value", data_cfg.bad_rows))
    if report.bad and mode is BadRows.error:
        listed = "\n  ".join(report.bad[:_LISTED_BAD_ROWS])
        more = f"\n  ... and {len(report.bad) - _LISTED_BAD_ROWS:,} more" if len(report.bad) > _LISTED_BAD_ROWS else ""
        raise DataError(f"{report.key}={report.path}: {len(report.bad):,} bad rows of {report.rows:,} "
                        f"(data.bad_rows=error):\n  {listed}{more}\nFix those rows (or data.prompt_key="
                        f"{data_cfg.prompt_key!r} / data.answer_key={data_cfg.answer_key!r} if they name the wrong "
                        "columns), or set data.bad_rows=skip to train on the rest.")
    if report.kept == 0:
        raise DataError(f"{report.key}={report.path}: no prompt left: {report.too_long:,} of {report.rows:,} are longer "
                        f"than data.max_prompt_len={report.max_prompt_len} tokens ({report.formatting}) and "
                        f"{len(report.bad):,} are bad rows; raise data.max_prompt_len or fix the file")


def read_records(path: str) -> list[dict]:
    """Rows of a small data file as dicts (tests, tools); training reads through load_problems."""
    return _Table(data_file(path), path).dataset.to_list()


class PromptStream:
    """`take(position, n)`: the n problems starting at a data position."""

    def __init__(self, data_cfg, seed: int, tokenizer, *, announce: bool = True):
        self.task: Task = TASKS.get(data_cfg.task)
        self.seed = seed
        self.problems: ProblemTable | None = None
        if data_cfg.train_path is not None:
            self.problems = load_problems(data_cfg, tokenizer, data_cfg.train_path)
            if announce:
                sys.stdout.write(self.problems.report.summary() + "\n")
        elif self.task.generate is None:
            raise ValueError(f"data.task={data_cfg.task} needs data.train_path (only synthetic tasks generate problems)")
        self._generated = PromptFormatter(data_cfg, tokenizer, generated=True)
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.problems)))
            random.Random(f"{self.seed}:epoch{epoch}").shuffle(order)
            self._orders = {epoch: order}
        return self._orders[epoch]

    def problem(self, position: int) -> Problem:
        if self.problems is None:
            problem = self.task.generate(self.seed, position)
            if self._generated.is_identity:
                return problem
            return replace(problem, prompt=self._generated.format(problem.prompt))
        epoch, offset = divmod(position, len(self.problems))
        return self.problems[self._order(epoch)[offset]]

    def take(self, position: int, n: int) -> list[Problem]:
        return [self.problem(position + i) for i in range(n)]
