"""`compose_shipped(overrides)`: launcher's compose() for tests that only need a config, at ~8 ms a point.

A full compose() runs Hydra every time (~220 ms on the 2-core machine), and the fast set composed some
150 points that way: about a third of its run. One PointComposer per test process (Hydra once per set
of group choices, then the same composed_from as compose()) gives the same Composed: the slow
tests/unit/config/test_compose_points.py checks that every point equals its full compose. Each call
returns its own copy (a pickle restore), so a test may edit what it gets.

Tests of composition itself keep launcher.config.compose.compose. So does any call made while
LAUNCHER_CONFIG_ROOTS names a root: a root changes which files a composition reads.
"""
import os

from launcher.config import files
from launcher.config.compose import Composed, compose
from launcher.config.compose_points import PointComposer
from launcher.paths import ROOTS_VAR

_composer: PointComposer | None = None
_signature: tuple | None = None
"""The recipe tree (files.store_all's signature) the composer's Hydra compositions were made from."""


def compose_shipped(overrides: list[str]) -> Composed:
    """compose(overrides) from the shipped recipe tree; raises ConfigError with the same findings."""
    if os.environ.get(ROOTS_VAR):
        return compose(overrides)
    return _current_composer().compose(list(overrides))


def _current_composer() -> PointComposer:
    """The process's PointComposer, made again when a recipe, cluster or model file changed since."""
    global _composer, _signature
    files.store_all()
    if _composer is None or files._stored_signature != _signature:
        _composer = PointComposer()
        _signature = files._stored_signature
    return _composer
