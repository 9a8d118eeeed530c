"""Rewriting a run's JSON-lines file (metrics.jsonl, samples.jsonl) on resume: the rows of the
steps past the checkpoint go, since those steps are redone."""
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path


def keep_rows(path: Path, keep: Callable[[dict], bool]) -> None:
    """Keep the rows `keep` accepts. A line that does not parse (the last one, cut short when a
    run was killed while writing it) is dropped with a message rather than failing every later
    resume. The file is replaced whole, so a crash here cannot tear it either."""
    if not path.exists():
        return
    kept = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            accepted = keep(json.loads(line))
        except (ValueError, KeyError, TypeError):
            sys.stderr.write(f"{path}: dropped line {number}, cut short or damaged (a run stopped while writing "
                             f"it?): {line[:80]!r}\n")
            continue
        if accepted:
            kept.append(line + "\n")
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text("".join(kept))
    os.replace(scratch, path)
