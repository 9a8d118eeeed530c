"""The data pre-flight: the first data.preflight_rows rows of data.train_path and
data.val_path, each prompt formatted and counted exactly as the run's loader does it
(launcher.rl.prompt_rows.measure_rows, the same PromptFormatter) with the run's tokenizer
files read by the `tokenizers` library (rl.tokenizer.preflight_tokenizer: no transformers,
no torch).

Rows are read with pyarrow (parquet: the first row group batch only) or json (the first
lines of a JSON-lines file), and named as the run names them: `file:line` for JSON lines,
`file row i` (0-based) otherwise. One sample per (data section, tokenizer folder, file
stamps) is cached, so the rules DATA006-DATA009 and the JSON summary share it.
"""
import itertools
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from launcher.json_lines import json_lines
from launcher.paths import resolve_data_path

FORMATS = (".jsonl", ".json", ".parquet")
_MAX_JSON_ARRAY_BYTES = 64 * 2**20
_CACHE: dict = {}
_CACHE_LIMIT = 64


@dataclass
class FileSample:
    key: str
    """data.train_path or data.val_path."""
    path: str
    rows_in_file: int | None
    """Known without reading the file (parquet metadata); None for JSON."""
    tokens: list[int] = field(default_factory=list)
    """Token count of each sampled row's formatted prompt (good rows only, file order)."""
    bad: list[str] = field(default_factory=list)
    """'where: why' of each bad sampled row."""
    rows_sampled: int = 0
    render_error: str | None = None
    """The chat template raised on a sampled prompt (the run would stop the same way)."""

    def lengths(self) -> dict | None:
        if not self.tokens:
            return None
        return {"min": min(self.tokens), "median": statistics.median(self.tokens), "max": max(self.tokens)}


@dataclass
class Sample:
    files: list[FileSample]
    formatting: str
    """What was counted, in the run's load report's words."""
    tokenizer: str
    """`model.tokenizer_path=...` / `model.hf_path=...` / `character tokenizer`."""
    skipped: str | None = None
    """Why no file could be sampled (the tokenizer cannot be read without transformers)."""
    tokenizer_key: str | None = None


def _files(data_cfg) -> list[tuple[str, str, Path]]:
    out = []
    for key, path in (("data.train_path", data_cfg.train_path), ("data.val_path", data_cfg.val_path)):
        if path is None:
            continue
        file = resolve_data_path(path)
        if file.suffix in FORMATS and file.is_file():  # otherwise DATA002's finding
            out.append((key, path, file))
    return out


def _stamp(file: Path):
    try:
        st = file.stat()
        return str(file.resolve()), st.st_mtime_ns, st.st_size
    except OSError:
        return str(file), None, None


# ---- reading the first rows ---------------------------------------------------------------------


def _head_parquet(file: Path, shown: str, n: int) -> tuple[list[str], list[dict], list[str], int]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(file)
    names = pf.schema_arrow.names
    rows: list[dict] = []
    for batch in pf.iter_batches(batch_size=n):
        rows += batch.to_pylist()
        if len(rows) >= n:
            break
    rows = rows[:n]
    return names, rows, [f"{shown} row {i}" for i in range(len(rows))], pf.metadata.num_rows


def _first_char(file: Path) -> str:
    with open(file, encoding="utf-8", errors="replace") as f:
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
    return head


def _head_json(file: Path, shown: str, n: int) -> tuple[list[str], list[dict], list[str], list[str]]:
    """(column names, rows, where each row is, bad lines) of the first n rows."""
    if _first_char(file) == "[":
        if file.stat().st_size > _MAX_JSON_ARRAY_BYTES:
            raise ValueError(f"a JSON array over {_MAX_JSON_ARRAY_BYTES >> 20} MiB is not sampled")
        rows = json.loads(file.read_text(encoding="utf-8"))
        rows = [r for r in rows[:n] if isinstance(r, dict)]
        names = list(dict.fromkeys(k for r in rows for k in r))
        return names, rows, [f"{shown} row {i}" for i in range(len(rows))], []
    rows, where, bad = [], [], []
    for line in itertools.islice(json_lines(file), n):
        if line.bad:
            bad.append(f"{shown}:{line.number}: {line.bad}")
        else:
            rows.append(line.row)
            where.append(f"{shown}:{line.number}")
    names = list(dict.fromkeys(k for r in rows for k in r))
    return names, rows, where, bad


def _sample_file(key: str, path: str, file: Path, formatter, data_cfg, n: int) -> FileSample | None:
    """None when the file's columns do not hold the keys (DATA004's finding) or it cannot be read
    (the run's load reports why)."""
    from launcher.rl.prompt_rows import measure_rows, split_key

    try:
        if file.suffix == ".parquet":
            names, rows, where, total = _head_parquet(file, path, n)
            bad_lines: list[str] = []
        else:
            names, rows, where, bad_lines = _head_json(file, path, n)
            total = None
    except (ImportError, OSError, ValueError):
        return None
    prompt, answer = split_key(names, data_cfg.prompt_key), split_key(names, data_cfg.answer_key)
    if rows and (prompt is None or answer is None):
        return None
    sample = FileSample(key=key, path=path, rows_in_file=total, rows_sampled=len(rows) + len(bad_lines),
                        bad=list(bad_lines))
    if not rows:
        return sample
    try:
        tokens, why = measure_rows(formatter, data_cfg.task, prompt[1], answer[1], [r.get(prompt[0]) for r in rows],
                                   [r.get(answer[0]) for r in rows])
    except Exception as err:  # noqa: BLE001 - a template that raises: the run's loader would stop on it
        sample.render_error = f"{type(err).__name__}: {err}"
        return sample
    sample.tokens = [t for t, w in zip(tokens, why, strict=True) if not w]
    sample.bad += [f"{where[i]}: {w}" for i, w in enumerate(why) if w]
    return sample


# ---- the sample ---------------------------------------------------------------------------------


def _tokenizer_label(model_cfg) -> tuple[str | None, str]:
    from launcher.rl.tokenizer import tokenizer_folder

    found = tokenizer_folder(model_cfg)
    if found is None:
        return None, "the character tokenizer (random init, no tokenizer folder)"
    return found[0], f"{found[0]}={found[1]}"


def data_sample(cfg) -> Sample | None:
    """The pre-flight sample of cfg's data files; None when there is nothing to sample (no
    data file, data.preflight_rows=0, an unknown task, a tokenizer folder that is not there:
    other rules' findings)."""
    d = cfg.data
    n = int(getattr(d, "preflight_rows", 0) or 0)
    files = _files(d)
    if n <= 0 or not files:
        return None
    from launcher.rl.tasks import TASKS
    from launcher.rl.tokenizer import tokenizer_folder

    if d.task not in TASKS.names():
        return None  # DATA001
    found = tokenizer_folder(cfg.model)
    if found is not None and not found[1].is_dir():
        return None  # MODEL rules name a checkpoint folder that is not there
    key = (n, d.task, d.prompt_key, d.answer_key, str(getattr(d.chat_template, "value", d.chat_template)),
           d.system_prompt, d.instruction, tuple((k, p, _stamp(f)) for k, p, f in files),
           None if found is None else (found[0], _stamp(found[1] / "tokenizer.json"),
                                       _stamp(found[1] / "tokenizer_config.json")),
           None if found is not None else cfg.model.arch.vocab_size)
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = _take_sample(cfg, files, n)
    return _CACHE[key]


def _take_sample(cfg, files, n: int) -> Sample:
    from launcher.rl.prompt_rows import describe_formatting
    from launcher.rl.prompts import PromptFormatter
    from launcher.rl.tokenizer import TokenizerFolderError, preflight_tokenizer

    tok_key, label = _tokenizer_label(cfg.model)
    try:
        tokenizer = preflight_tokenizer(cfg.model)
    except (TokenizerFolderError, ImportError, OSError, ValueError) as err:  # tokenizers' own errors are Exceptions
        return Sample(files=[], formatting="", tokenizer=label, skipped=str(err), tokenizer_key=tok_key)
    except Exception as err:  # noqa: BLE001 - a tokenizer.json the `tokenizers` library cannot parse
        return Sample(files=[], formatting="", tokenizer=label, skipped=f"{type(err).__name__}: {err}",
                      tokenizer_key=tok_key)
    formatter = PromptFormatter(cfg.data, tokenizer)
    sampled = [s for k, p, f in files if (s := _sample_file(k, p, f, formatter, cfg.data, n)) is not None]
    return Sample(files=sampled, formatting=describe_formatting(formatter, cfg.data), tokenizer=label, tokenizer_key=tok_key)


def summary(cfg) -> dict | None:
    """`validate --format json`'s "data": per sampled file the rows read and the token-length
    distribution against data.max_prompt_len and inference.max_model_len."""
    sample = data_sample(cfg)
    if sample is None:
        return None
    out = {"tokenizer": sample.tokenizer, "formatting": sample.formatting, "files": []}
    if sample.skipped:
        out["skipped"] = sample.skipped
    room = cfg.inference.max_model_len - cfg.algorithm.max_response_len
    for f in sample.files:
        out["files"].append({
            "key": f.key, "path": f.path, "rows_in_file": f.rows_in_file, "rows_sampled": f.rows_sampled,
            "bad_rows": len(f.bad), "prompt_tokens": f.lengths(),
            "longer_than_max_prompt_len": sum(t > cfg.data.max_prompt_len for t in f.tokens),
            "no_room_in_max_model_len": sum(t > room for t in f.tokens if t <= cfg.data.max_prompt_len),
        })
    return out
