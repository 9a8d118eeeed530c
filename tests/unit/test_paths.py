"""Config roots and data paths (launcher/paths.py): where the shipped trees are, how a user's roots
add to and override them, how a relative data path is looked up, and the messages that say so.

The wheel itself (built, installed, run from another folder, checked by pre-commit) is
tests/integration/test_install.py; these run in the editable checkout, in-process."""
import importlib.util
import os
from importlib import metadata
from pathlib import Path

import pytest

from launcher import paths
from launcher.__main__ import main
from launcher.config.compose import compose
from launcher.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def roots(monkeypatch, tmp_path):
    """LAUNCHER_CONFIG_ROOTS cleared for the test (and restored after, also when main() appends to it)."""
    monkeypatch.setenv(paths.ROOTS_VAR, "")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_shipped_root_of_a_checkout_is_the_repository():
    """An editable install imports the package from the checkout, whose top level holds the trees."""
    assert paths.shipped_root() == ROOT
    assert (paths.shipped_root() / "recipes" / "tiny_grpo_chat.yaml").is_file()


def test_a_wheel_copy_next_to_the_package_is_the_shipped_root(monkeypatch, tmp_path):
    (tmp_path / "launcher" / "_shipped" / "recipes").mkdir(parents=True)
    monkeypatch.setattr(paths, "_PACKAGE", tmp_path / "launcher")
    assert paths.shipped_root() == tmp_path / "launcher" / "_shipped"


def test_user_roots_follow_the_shipped_root_once_each(roots, monkeypatch):
    team, other = roots / "team", roots / "other"
    monkeypatch.setenv(paths.ROOTS_VAR, os.pathsep.join(map(str, [team, ROOT, other])))
    assert paths.config_roots() == [ROOT, team, other]
    paths.add_root(".")
    assert paths.extra_roots() == [team, ROOT, other, roots]


def test_data_paths_are_looked_up_in_the_current_folder_then_user_roots_last_first_then_shipped(roots, monkeypatch):
    team, later = roots / "team", roots / "later"
    monkeypatch.setenv(paths.ROOTS_VAR, os.pathsep.join(map(str, [team, later])))
    assert paths.data_path_candidates("data/x.jsonl") == [
        Path("data/x.jsonl"), later / "data/x.jsonl", team / "data/x.jsonl", ROOT / "data/x.jsonl"]
    assert paths.data_path_candidates("/abs/x.jsonl") == [Path("/abs/x.jsonl")]


def test_the_first_existing_data_file_wins_and_a_missing_one_is_the_current_folders(roots, monkeypatch):
    team = _tree(roots / "team", {"data/copy_val.parquet": "team's", "data/mine.jsonl": "{}"})
    monkeypatch.setenv(paths.ROOTS_VAR, str(team))
    assert paths.resolve_data_path("data/copy_train.parquet") == ROOT / "data/copy_train.parquet"  # shipped sample
    assert paths.resolve_data_path("data/copy_val.parquet") == team / "data/copy_val.parquet"  # the team's shadows it
    _tree(roots, {"data/mine.jsonl": "{}"})
    assert paths.resolve_data_path("data/mine.jsonl") == Path("data/mine.jsonl")  # the current folder first
    assert paths.resolve_data_path("data/none.jsonl") == Path("data/none.jsonl")


def test_data002_names_every_place_looked_and_the_rule(point):
    (finding,) = point("recipe=tiny_grpo_chat", "data.val_path=data/none.parquet").of("DATA002")
    assert str(Path.cwd() / "data/none.parquet") in finding.message
    assert str(ROOT / "data/none.parquet") in finding.message
    assert paths.DATA_RULE in finding.fix


def test_data004_warns_that_parquet_columns_go_unchecked_without_pyarrow(monkeypatch):
    """The checks-only install (no `rl` extra) has no pyarrow: the column check is skipped out loud."""
    from launcher.validate.rules.data import columns_usable

    composed = compose(["recipe=tiny_grpo_chat"])
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else find_spec(name, *a))
    findings = list(columns_usable(composed.config, None))
    assert [(f.id, f.severity, f.key) for f in findings] == [("DATA004", "warning", "data.train_path"),
                                                            ("DATA004", "warning", "data.val_path")]
    assert "pyarrow is not installed" in findings[0].message


def test_an_unknown_name_lists_what_each_root_has(roots, monkeypatch):
    team = _tree(roots / "team", {"clusters/our_pod.yaml": "name: our_pod\n"})
    monkeypatch.setenv(paths.ROOTS_VAR, str(team))
    with pytest.raises(ConfigError) as info:
        compose(["recipe=tiny_grpo", "cluster=nope"])
    (finding,) = info.value.findings
    assert finding.id == "CFG003"
    assert f"from {ROOT}: b200x8, " in finding.message and f"from {team}: our_pod." in finding.message
    assert "our_pod" in finding.fix and "b300x2" in finding.fix


TEAM_RECIPES = {
    # a shipped recipe as the base, on a shipped cluster: no launcher file copied into the team's repository
    "recipes/my_dapo.yaml": "defaults:\n  - /recipe/dapo_sync@_here_\n  - _self_\nrun:\n  name: my_dapo\n",
    "recipes/my_tiny.yaml": "defaults:\n  - /recipe/tiny_grpo@_here_\n  - override /cluster: local\n  - _self_\n"
                            "run:\n  name: my_tiny\n",
}


def test_validate_all_with_a_root_checks_that_roots_recipes_only(roots, capsys):
    _tree(roots, TEAM_RECIPES)
    assert main(["validate", "--all", "--root", "."]) == 0
    out = capsys.readouterr().out
    assert "recipe=my_dapo [my_dapo on b300x2]: 0 error(s)" in out
    assert "recipe=my_tiny [my_tiny on local]: 0 error(s)" in out
    assert "recipe=dapo_sync " not in out  # the shipped recipes are the launcher's CI's to check


def test_a_team_recipe_with_an_illegal_mesh_fails_validate_all(roots, capsys):
    _tree(roots, {**TEAM_RECIPES, "recipes/bad.yaml": TEAM_RECIPES["recipes/my_dapo.yaml"] + "trainer:\n  mesh:\n"
                  "    tp: 3\n"})
    assert main(["validate", "--all", "--root", "."]) == 1
    out = capsys.readouterr().out
    assert "recipe=bad [bad on b300x2]" in out and "[ERROR MESH001] trainer.mesh.tp" in out


def test_a_root_without_recipes_has_nothing_to_validate(roots, capsys):
    _tree(roots, {"clusters/our_pod.yaml": "name: our_pod\n"})
    assert main(["validate", "--all", "--root", "."]) == 0
    assert "nothing to validate" in capsys.readouterr().out


def test_version_names_the_installed_distribution(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"glm5-rl-launcher {metadata.version('glm5-rl-launcher')} (configs: {ROOT})\n"
