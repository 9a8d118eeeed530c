"""Reads the YAML trees and stores each file in Hydra's ConfigStore under its group.

The group folders are named for people (`recipes/`, `clusters/`) while users type the
singular group (`recipe=`, `cluster=`), so files are registered explicitly rather than
found through a Hydra search path. Parsing here also lets a YAML syntax error name its
file and line.
"""
from pathlib import Path

import yaml
from hydra.core.config_store import ConfigStore

from launcher._paths import GROUP_DIRS, config_roots
from launcher.errors import ConfigError, Finding

PACKAGE_OF_GROUP = {"recipe": "_global_", "cluster": "cluster", "model": "model"}


def available(group: str) -> dict[str, Path]:
    """Config name -> file for one group, over every config root."""
    found: dict[str, Path] = {}
    for root in config_roots():
        folder = root / GROUP_DIRS[group]
        for path in sorted(folder.glob("*.yaml")):
            found[path.stem] = path
    return found


def load_yaml(path: Path) -> dict:
    """Parse one file; a syntax error becomes a finding naming the file and line."""
    try:
        node = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([Finding(
            id="CFG004", severity="error", key=str(path),
            message=f"YAML syntax error in {path}{line}: {problem}",
            why="The file cannot be parsed, so no config can be composed from it.",
            fix=f"Fix the YAML at {path}{line} (indentation, a missing ':' or an unclosed bracket).",
        )]) from None
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise ConfigError([Finding(
            id="CFG004", severity="error", key=str(path),
            message=f"{path} holds a {type(node).__name__}, not a mapping of keys",
            why="Every recipe, cluster and model file is a mapping of config keys to values.",
            fix=f"Rewrite {path} as `key: value` lines.",
        )])
    return node


_stored_signature: tuple | None = None
BROKEN: dict[tuple[str, str], ConfigError] = {}
"""Files that failed to parse: reported when (and only when) a composition selects them."""


def store_all() -> None:
    """Register every recipe, cluster and model file (re-read when files changed)."""
    global _stored_signature
    files = {group: available(group) for group in GROUP_DIRS}
    signature = tuple((g, n, p.stat().st_mtime_ns) for g, f in files.items() for n, p in f.items())
    if signature == _stored_signature:
        return
    store = ConfigStore.instance()
    BROKEN.clear()
    for group, named in files.items():
        for name, path in named.items():
            try:
                node = load_yaml(path)
            except ConfigError as err:
                BROKEN[(group, name)] = err
                continue
            store.store(group=group, name=name, node=node, package=PACKAGE_OF_GROUP[group])
    _stored_signature = signature
