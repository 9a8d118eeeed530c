"""A key or section written twice in a recipe or cluster file is a finding (CFG006) naming the file and both lines."""
from pathlib import Path

import pytest
import yaml

from launcher.config.compose import compose
from launcher.errors import ConfigError

HEADER = "defaults:\n  - /cluster: local\n  - /model: tiny\n  - _self_\n"


def _finding(overrides):
    with pytest.raises(ConfigError) as err:
        compose(overrides)
    return err.value.findings[0]


@pytest.mark.parametrize("body, key, lines", [
    ("trainer:\n  mesh:\n    tp: 8\n    tp: 2\n", "tp", (7, 8)),
    ("algorithm:\n  name: dapo\nrun:\n  steps: 3\nalgorithm:\n  name: grpo\n", "algorithm", (5, 9)),
])
def test_duplicate_key_or_section_names_file_and_both_lines(tmp_path, monkeypatch, body, key, lines):
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "dup.yaml").write_text(HEADER + body)
    monkeypatch.setenv("LAUNCHER_CONFIG_ROOTS", str(tmp_path))
    f = _finding(["recipe=dup"])
    assert f.id == "CFG006" and str(recipes / "dup.yaml") in f.message
    assert f"`{key}`" in f.message and f"line {lines[0]}" in f.message and f"line {lines[1]}" in f.message
    assert compose(["recipe=tiny_grpo"]).choices["recipe"] == "tiny_grpo"


def test_duplicate_key_in_a_cluster_file(tmp_path, monkeypatch):
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    local = yaml.safe_load((Path(__file__).parents[3] / "clusters/local.yaml").read_text())
    text = yaml.safe_dump(local, sort_keys=False) + f"nodes: {local.get('nodes', 1)}\n"
    (clusters / "dupc.yaml").write_text(text)
    monkeypatch.setenv("LAUNCHER_CONFIG_ROOTS", str(tmp_path))
    f = _finding(["recipe=tiny_grpo", "cluster=dupc"])
    assert f.id == "CFG006" and "dupc.yaml" in f.message and "`nodes`" in f.message
