"""Shared fixtures: composed + planned + checked points (cached per session) and the CLI as a subprocess."""
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Point:
    """One composed config with its plan and every finding (errors first)."""

    composed: object
    plan: object
    findings: tuple

    @property
    def cfg(self):
        return self.composed.config

    @property
    def ids(self) -> set[str]:
        return {f.id for f in self.findings}

    @property
    def errors(self) -> list:
        return [f for f in self.findings if f.severity == "error"]

    def of(self, rule_id: str) -> list:
        return [f for f in self.findings if f.id == rule_id]


@pytest.fixture(scope="session")
def point():
    """`point("recipe=dapo_sync", "trainer.mesh.pp=2")` -> Point, composed once per session.

    The plan is made with an empty driver environment so results do not depend on the shell
    the tests run in (pass driver_env to test CUDA_HOME forwarding). Points are read-only.
    Points are composed by one PointComposer (Hydra once per set of group choices, ~5 ms a
    point instead of ~200 ms); tests/unit/config/test_compose_points.py checks that its points
    equal a full compose.
    """
    from launcher.config.compose_points import PointComposer
    from launcher.plan import make_plan
    from launcher.validate import check

    cache: dict[tuple, Point] = {}
    composer = PointComposer()

    def get(*overrides: str, driver_env: dict | None = None) -> Point:
        key = (overrides, tuple(sorted((driver_env or {}).items())))
        if key not in cache:
            composed = composer.compose(list(overrides))
            plan = make_plan(composed.config, driver_env=driver_env or {})
            cache[key] = Point(composed, plan, tuple(check(composed.config, plan)))
        return cache[key]

    return get


@pytest.fixture(scope="session")
def cli():
    """`cli("validate", "recipe=dapo_sync", "--format", "json")` -> CompletedProcess (cwd = repo root)."""

    def run(*args: str, cwd: Path = ROOT, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)

    return run


def _tiny_checkpoint(tmp_path_factory, descriptor: str) -> Path:
    pytest.importorskip("transformers")
    from launcher.workers.hf.tiny_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp(f"ckpt_{descriptor}"), descriptor)


@pytest.fixture(scope="session")
def tiny_glm_checkpoint(tmp_path_factory) -> Path:
    """A glm5_next checkpoint folder of model/descriptors/tiny.yaml in the release layout
    (>= 5 shards + index, tokenizer, several eos ids); built once per session, read-only."""
    return _tiny_checkpoint(tmp_path_factory, "tiny")


@pytest.fixture(scope="session")
def tiny_qwen3_checkpoint(tmp_path_factory) -> Path:
    """The same for model/descriptors/tiny_qwen3.yaml (a plain qwen3); read-only."""
    return _tiny_checkpoint(tmp_path_factory, "tiny_qwen3")
