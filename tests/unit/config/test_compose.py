"""Composition: every recipe on its cluster (and every cluster), and bad input as findings."""
import pytest

from launcher.config.compose import compose
from launcher.config.files import available
from launcher.errors import ConfigError

RECIPES = sorted(available("recipe"))
CLUSTERS = sorted(available("cluster"))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_composes_on_its_cluster(recipe):
    composed = compose([f"recipe={recipe}"])
    assert composed.choices["recipe"] == recipe
    assert composed.config.cluster.name == composed.choices["cluster"]
    assert composed.config.run.name


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_cluster_override_replaces_the_recipe_default(cluster):
    composed = compose(["recipe=dapo_sync", f"cluster={cluster}"])
    assert composed.config.cluster.name == cluster


def test_default_recipe_is_the_laptop_demo():
    assert compose([]).choices["recipe"] == "tiny_grpo_chat"


def test_lora_rank_zero_is_full_finetuning():
    assert compose(["recipe=dapo_fullft"]).config.trainer.lora.rank == 0


def _finding(overrides):
    with pytest.raises(ConfigError) as info:
        compose(overrides)
    (finding,) = info.value.findings
    return finding


def test_unknown_nested_key_names_full_key_and_closest():
    f = _finding(["trainer.mesh.tpp=2"])
    assert (f.id, f.key) == ("CFG001", "trainer.mesh.tpp")
    assert "`trainer.mesh.tp`" in f.message


@pytest.mark.slow
def test_a_key_added_with_plus_to_a_typed_section_is_unknown():
    """`+` lifts Hydra's struct check; the schema still has no such key."""
    f = _finding(["recipe=tiny_grpo", "+trainer.mesh.tpp=2"])
    assert (f.id, f.key) == ("CFG001", "trainer.mesh.tpp") and "`trainer.mesh.tp`" in f.message
    assert compose(["recipe=tiny_grpo", "+env.MY_FLAG=1"]).config.env["MY_FLAG"] == "1"  # free-form section


def test_removing_a_schema_key_says_to_set_it_instead():
    f = _finding(["recipe=tiny_grpo", "~trainer.mesh.tp"])
    assert (f.id, f.key) == ("CFG001", "trainer.mesh.tp") and "trainer.mesh.tp=VALUE" in f.fix


def test_unknown_section_names_closest_section():
    f = _finding(["trainr.mesh.tp=2"])
    assert f.id == "CFG001" and "`trainer`" in f.message


def test_wrong_type_names_key_value_and_type():
    f = _finding(["trainer.mesh.tp=abc"])
    assert (f.id, f.key) == ("CFG002", "trainer.mesh.tp")
    assert "'abc'" in f.message and "expected int" in f.message


def test_wrong_enum_lists_choices():
    f = _finding(["placement.mode=sideways"])
    assert f.id == "CFG002" and "colocated, async" in f.message


@pytest.mark.parametrize("group", ["recipe", "cluster", "model"])
def test_unknown_group_option_lists_available(group):
    f = _finding([f"{group}=nope"])
    assert (f.id, f.key) == ("CFG003", group)
    for name in available(group):
        assert name in f.message


def test_bad_override_syntax():
    assert _finding(["trainer.mesh.tp"]).id == "CFG005"


@pytest.mark.slow
def test_typo_and_yaml_error_in_an_extra_recipe_tree(tmp_path, monkeypatch):
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "typo.yaml").write_text("defaults:\n  - /cluster: local\n  - /model: tiny\n  - _self_\n"
                                       "trainer:\n  mesh:\n    tpp: 2\n")
    (recipes / "broken.yaml").write_text("trainer:\n  mesh: [tp: 2\n")
    monkeypatch.setenv("LAUNCHER_CONFIG_ROOTS", str(tmp_path))
    typo = _finding(["recipe=typo"])
    assert typo.id == "CFG001" and str(recipes / "typo.yaml") in typo.message
    broken = _finding(["recipe=broken"])
    assert broken.id == "CFG004" and f"{recipes / 'broken.yaml'}:3" in broken.message
    assert compose(["recipe=tiny_grpo"]).choices["recipe"] == "tiny_grpo"
