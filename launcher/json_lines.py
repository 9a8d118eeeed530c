"""A JSON-lines data file line by line, the one reading that the run's loader
(driver/loop/data.py, to find the lines it must skip) and validate's pre-flight
(validate/data_sample.py, on the first rows) share, so both call a line bad for the same
reason and name it by the same 1-based line number. A foundation module, so every layer
may import it.
"""
import json
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple


class JsonLine(NamedTuple):
    number: int
    """1-based line number in the file (blank lines count)."""
    row: dict | None
    """The line's object; None when the line is bad."""
    bad: str
    """Why the line holds no row ("" when it holds one)."""


def json_lines(file: Path) -> Iterator[JsonLine]:
    """Every non-blank line of `file` in order; blank lines hold no row and are passed over.
    Bytes that are not UTF-8 are replaced, so they make a bad line rather than stop the read."""
    with open(file, encoding="utf-8", errors="replace") as f:
        for number, text in enumerate(f, 1):
            if text.strip():
                yield _parsed(number, text)


def _parsed(number: int, text: str) -> JsonLine:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as err:
        return JsonLine(number, None, f"malformed JSON ({err.msg} at column {err.colno})")
    if not isinstance(row, dict):
        return JsonLine(number, None, f"a JSON {type(row).__name__}, not an object")
    return JsonLine(number, row, "")
