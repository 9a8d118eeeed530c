"""Field docstrings of the schema, read from the source: the single place a key is documented.

`python -m launcher --help keys` prints them, so the key reference cannot drift from the
dataclasses.
"""
import ast
import dataclasses
import functools
import inspect
import typing

from launcher.config.schema.keys import _unwrap_optional, type_name
from launcher.config.schema.root import LauncherConfig


def _field_docs(cls) -> dict[str, str]:
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    docs = {}
    for stmt, nxt in zip(body, body[1:], strict=False):
        if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[stmt.target.id] = " ".join(str(nxt.value.value).split())
    return docs


@functools.cache
def key_reference() -> list[tuple[str, str, str]]:
    """(dotted key, type, docstring) for every key of the schema, in declaration order."""
    rows: list[tuple[str, str, str]] = []

    def walk(cls, prefix: str) -> None:
        docs = _field_docs(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            inner, _ = _unwrap_optional(hints[f.name])
            rows.append((prefix + f.name, type_name(hints[f.name]), docs.get(f.name, "")))
            if dataclasses.is_dataclass(inner):
                walk(inner, f"{prefix}{f.name}.")

    walk(LauncherConfig, "")
    return rows
