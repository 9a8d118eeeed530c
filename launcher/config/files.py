"""Reads the YAML trees and stores each file in Hydra's ConfigStore under its group.

The group folders are named for people (`recipes/`, `clusters/`) while users type the
singular group (`recipe=`, `cluster=`), so files are registered explicitly rather than
found through a Hydra search path. Parsing here also lets a YAML syntax error name its
file and line, and a key or section written twice be an error naming both lines (PyYAML
and OmegaConf silently keep the last one: a second `algorithm:` would replace the first).
"""
from pathlib import Path

import yaml
from hydra.core.config_store import ConfigStore

from launcher.errors import ConfigError, Finding
from launcher.paths import GROUP_DIRS, config_roots

PACKAGE_OF_GROUP = {"recipe": "_global_", "cluster": "cluster", "model": "model"}


def in_root(root: Path, group: str) -> dict[str, Path]:
    """Config name -> file for one group in one config root."""
    return {path.stem: path for path in sorted((root / GROUP_DIRS[group]).glob("*.yaml"))}


def available(group: str) -> dict[str, Path]:
    """Config name -> file for one group, over every config root (a later root wins a clash)."""
    found: dict[str, Path] = {}
    for root in config_roots():
        found.update(in_root(root, group))
    return found


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: str, first_line: int, second_line: int):
        super().__init__(f"duplicate key {key!r}")
        self.key, self.first_line, self.second_line = key, first_line, second_line


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """SafeLoader that refuses a mapping holding the same key twice (at any depth), on libyaml's
    parser where PyYAML has it: every recipe, cluster and model file is parsed on every `validate`
    (pre-commit), and the pure-Python parser is the slower one. Same constructor either way."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark.line + 1)
                except TypeError:  # an unhashable key: SafeLoader's own error follows
                    continue
                if first != key_node.start_mark.line + 1:
                    raise _DuplicateKey(str(key), first, key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep=deep)


def _duplicate_finding(path: Path, dup: _DuplicateKey) -> Finding:
    return Finding(
        id="CFG006", severity="error", key=str(path),
        message=f"`{dup.key}` is written twice in {path}: line {dup.first_line} and line {dup.second_line}",
        why="YAML keeps only the last one silently, so the first value (or whole section) would be lost "
            "without a word.",
        fix=f"Keep one `{dup.key}` in {path} (merge the two, or delete line {dup.first_line} or {dup.second_line}).",
    )


def load_yaml(path: Path) -> dict:
    """Parse one file; a syntax error or a duplicate key becomes a finding naming the file and line(s)."""
    try:
        node = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as dup:
        raise ConfigError([_duplicate_finding(path, dup)]) from None
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
