"""What a data file's columns hold, read without loading it: the parquet schema
(pyarrow.parquet.read_schema) or the first rows of a JSON-lines file.

The validator (DATA004) uses this to refuse a file whose data.prompt_key / data.answer_key
is missing or of the wrong type before Ray starts. Pure Python + pyarrow's schema reader:
no torch, transformers or datasets (validation runs anywhere, in well under a second).

Kinds: "text", "number", "messages" (a list of {role, content}), "struct" (with fields),
"list" (of something else), "null" (only nulls seen), "other".
"""
import json
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from launcher.json_lines import json_lines

SAMPLE_ROWS = 200
"""JSON-lines rows read to infer the columns' kinds."""
_MAX_JSON_ARRAY_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Column:
    kind: str
    fields: dict = field(default_factory=dict)
    """name -> Column, for a struct."""
    detail: str = ""
    """What the kind is made of, for messages (e.g. a list of int64)."""


class NoColumn(KeyError):
    """The key names no column; `.available` lists the dotted names there are."""

    def __init__(self, key: str, available: list[str], missing: str):
        super().__init__(key)
        self.key, self.available, self.missing = key, available, missing


# ---- parquet ------------------------------------------------------------------------------------


def _arrow_column(tp) -> Column:
    import pyarrow as pa

    t = pa.types
    if t.is_string(tp) or t.is_large_string(tp) or getattr(t, "is_string_view", lambda _: False)(tp):
        return Column("text")
    if t.is_integer(tp) or t.is_floating(tp) or t.is_decimal(tp):
        return Column("number")
    if t.is_null(tp):
        return Column("null")
    if t.is_struct(tp):
        return Column("struct", {tp.field(i).name: _arrow_column(tp.field(i).type) for i in range(tp.num_fields)})
    if t.is_list(tp) or t.is_large_list(tp) or t.is_fixed_size_list(tp):
        item = _arrow_column(tp.value_type)
        if item.kind == "struct" and item.fields.get("content", Column("other")).kind == "text" and "role" in item.fields:
            return Column("messages")
        return Column("list", detail=f"a list of {tp.value_type}")
    return Column("other", detail=str(tp))


def parquet_columns(file: Path) -> dict[str, Column]:
    import pyarrow.parquet as pq

    schema = pq.read_schema(file)
    return {f.name: _arrow_column(f.type) for f in schema}


# ---- JSON ---------------------------------------------------------------------------------------


def _value_column(value) -> Column:
    if value is None:
        return Column("null")
    if isinstance(value, str):
        return Column("text")
    if isinstance(value, bool):
        return Column("other", detail="a boolean")
    if isinstance(value, int | float):
        return Column("number")
    if isinstance(value, dict):
        return Column("struct", {k: _value_column(v) for k, v in value.items()})
    if isinstance(value, list):
        if value and all(isinstance(m, dict) and isinstance(m.get("content"), str) and "role" in m for m in value):
            return Column("messages")
        inner = sorted({type(v).__name__ for v in value}) or ["nothing"]
        return Column("list", detail=f"a list of {'/'.join(inner)}")
    return Column("other", detail=type(value).__name__)


def _merge(a: Column, b: Column) -> Column:
    """Two rows' kinds of one column: null yields to the other, structs merge field-wise,
    a disagreement keeps the first non-matching kind visible as `other`."""
    if a.kind == "null":
        return b
    if b.kind == "null" or a == b:
        return a
    if a.kind == b.kind == "struct":
        names = dict.fromkeys([*a.fields, *b.fields])
        return Column("struct", {n: _merge(a.fields.get(n, Column("null")), b.fields.get(n, Column("null")))
                                 for n in names})
    if {a.kind, b.kind} == {"list", "messages"}:
        return a if a.kind == "list" else b
    return Column("other", detail=f"{a.detail or a.kind} in some rows, {b.detail or b.kind} in others")


def _json_rows(file: Path) -> list[dict]:
    with open(file, encoding="utf-8", errors="replace") as f:
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
    if head == "[" and file.stat().st_size <= _MAX_JSON_ARRAY_BYTES:
        try:
            rows = json.loads(file.read_text(encoding="utf-8", errors="replace"))
        except json.JSONDecodeError:
            return []
        return [r for r in rows[:SAMPLE_ROWS] if isinstance(r, dict)]
    # a bad line is passed over here: the run's load reports it with its line (data.bad_rows)
    return list(islice((line.row for line in json_lines(file) if line.row is not None), SAMPLE_ROWS))


def json_columns(file: Path) -> dict[str, Column] | None:
    """Columns of the first SAMPLE_ROWS rows; None when none could be read (a large JSON
    array, or nothing parses)."""
    rows = _json_rows(file)
    if not rows:
        return None
    columns: dict[str, Column] = {}
    for row in rows:
        for name, value in row.items():
            columns[name] = _merge(columns.get(name, Column("null")), _value_column(value))
    return columns


def file_columns(file: Path) -> dict[str, Column] | None:
    """The columns of a .parquet/.jsonl/.json file, or None when they cannot be read cheaply
    (pyarrow missing, unreadable file): the load then reports what it finds."""
    try:
        if file.suffix == ".parquet":
            return parquet_columns(file)
        return json_columns(file)
    except (ImportError, OSError, ValueError):
        return None


def dotted_names(columns: dict[str, Column], prefix: str = "") -> list[str]:
    out = []
    for name, col in columns.items():
        out.append(prefix + name)
        out += dotted_names(col.fields, prefix + name + ".")
    return out


def resolve(columns: dict[str, Column], key: str) -> Column:
    """The column a dotted key names (a top-level name holding dots wins); raises NoColumn."""
    parts = key.split(".")
    for cut in range(len(parts), 0, -1):
        top = ".".join(parts[:cut])
        if top in columns:
            col, walked = columns[top], top
            for name in parts[cut:]:
                if col.kind != "struct" or name not in col.fields:
                    raise NoColumn(key, dotted_names(columns), f"{walked} ({col.kind}) has no field {name!r}")
                col, walked = col.fields[name], f"{walked}.{name}"
            return col
    raise NoColumn(key, dotted_names(columns), f"no column {parts[0]!r}")
