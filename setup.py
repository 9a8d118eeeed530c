"""Build hook: the wheel carries the launcher's recipes, clusters, model descriptors and sample data.

Those trees sit at the repository's top level (recipes/, clusters/, model/descriptors/, data/: the
layout the project's charter fixes), outside the `launcher` package, so setuptools alone would leave
them out of the wheel. build_py copies them into the wheel's `launcher/_shipped/`, which
`launcher.paths.shipped_root()` finds through the installed package. A copy made at build time
rather than symlinks in the tree: symlinks need a checkout that keeps them (Windows' git does not),
and the copy starts from an empty folder, so a file removed from the repository cannot linger in
a wheel built from a stale build/. Editable installs skip build_py; there the package folder lies in
the checkout, and shipped_root() is the checkout itself. MANIFEST.in puts the trees in the sdist.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
TREES = ("recipes", "clusters", "model/descriptors", "data")


class BuildPyWithTrees(build_py):
    """build_py, then the shipped trees into <build_lib>/launcher/_shipped/ (same layout as here)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib, "launcher", "_shipped")
        shutil.rmtree(target, ignore_errors=True)
        for tree in TREES:
            shutil.copytree(ROOT / tree, target / tree, ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildPyWithTrees})
