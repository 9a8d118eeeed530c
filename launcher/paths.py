"""Where the config trees live: recipes/, clusters/ and model/descriptors/ of the project.

`LAUNCHER_CONFIG_ROOTS` (os.pathsep-separated folders, each with any of those three
subfolders) adds trees, e.g. a team repository of recipes checked by pre-commit.
"""
import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent

GROUP_DIRS = {"recipe": "recipes", "cluster": "clusters", "model": "model/descriptors"}


def config_roots() -> list[Path]:
    """Project root first, then the user's extra roots (later roots win on a name clash)."""
    extra = os.environ.get("LAUNCHER_CONFIG_ROOTS", "")
    return [PROJECT_ROOT] + [Path(p).resolve() for p in extra.split(os.pathsep) if p]


def resolve_data_path(path: str) -> Path:
    """A data file as given, else relative to the project root (recipes name `data/...`)."""
    given = Path(path).expanduser()
    if given.is_absolute() or given.exists():
        return given
    return PROJECT_ROOT / given
