"""A sweep composes each set of group choices once with Hydra and applies the rest as value overrides
(launcher/config/compose_points.py): every point's config, findings and plan equal a full compose of it."""
import pytest
from omegaconf import OmegaConf

from launcher.cli.sweep import evaluate, expand
from launcher.config.compose import compose
from launcher.config.compose_points import PointComposer
from launcher.errors import ConfigError
from launcher.validate import plan_and_check
from tests.unit.config.test_model_folder import glm_config, write_model_folder

SWEEP = ["recipe=dapo_sync,tiny_grpo", "cluster=b300x2,h200x2", "trainer.mesh.tp=2,abc,0"]
"""12 points on 4 sets of group choices: legal and illegal meshes, a wrong type and an out-of-range value."""

ODD_POINTS = [
    ["recipe=dapo_async", "trainer.mesh.ep=8", "trainer.mesh.tpp=2"],  # unknown key
    ["recipe=nope", "trainer.mesh.tp=2"],  # unknown recipe: the cached group composition fails
    ["recipe=dapo_sync", "algorithm.prompts_per_step=0", "algorithm.samples_per_prompt=-1"],  # two CFG007
    ["~trainer.mesh.tp"],
    ["+trainer.mesh.tp=2"],  # `+` on a key that exists
    ["++trainer.mesh.tp=4", "cluster=b300x2"],
    ["recipe=dapo_sync", "trainer.mesh={tp: 2, ep: 4}"],  # a dict value on a non-group key
    ["trainer.mesh.tp=2", "recipe=dapo_sync", "trainer.mesh.tp=4"],  # the last value wins, groups anywhere
    ["run.name=${cluster.name}_sweep", "cluster=h200x2"],  # interpolation resolved against the point's cluster
    ["cluster=b300x3", "cluster.gpus_per_node=4", "model=tiny", "model.arch.num_hidden_layers=3"],  # group + value
    ["hydra.job.name=other", "trainer.mesh.tp=2"],  # Hydra's own override stays with the group choices
    ["trainer.mesh.tp=[1"],  # does not parse
    ["trainer.mesh.tp=1,2"],  # a sweep left unexpanded
]


def outcome(compose_point, overrides: list[str]) -> dict:
    """Everything a point yields: the resolved config and typed object, or the composition findings;
    then the validator's findings and the plan."""
    try:
        composed = compose_point(overrides)
    except ConfigError as err:
        return {"compose_findings": err.findings}
    findings, plan = plan_and_check(composed)
    return {"config": OmegaConf.to_container(composed.cfg, resolve=True), "struct": OmegaConf.is_struct(composed.cfg),
            "typed": composed.config, "choices": composed.choices, "findings": findings,
            "plan": plan.to_dict() if plan.mesh_ok else None}


@pytest.mark.slow
def test_every_sweep_point_equals_its_full_compose():
    composer = PointComposer()
    points = expand(SWEEP) + ODD_POINTS
    full = []
    for point in points:  # back to back: a recipe file added meanwhile would change CFG003's list of recipes
        got, want = outcome(composer.compose, point), outcome(compose, point)
        assert got == want, point
        full.append(want)
    ids = {f.id for o in full for f in o.get("compose_findings", [])}
    assert {"CFG000", "CFG001", "CFG002", "CFG003", "CFG005", "CFG007"} <= ids
    assert sum("plan" in o and o["plan"] is not None for o in full) >= 3
    assert any(o.get("findings") and o["findings"][0].severity == "error" for o in full)  # illegal, composed


def test_hydra_composes_once_per_set_of_group_choices():
    composer = PointComposer()
    configs = [composer.compose(p) for p in expand(["recipe=dapo_sync,tiny_grpo", "trainer.mesh.tp=1,2,4"])]
    assert composer.hydra_compositions == 2
    assert [c.config.trainer.mesh.tp for c in configs] == [1, 2, 4, 1, 2, 4]
    assert configs[0].cfg is not configs[1].cfg  # each point its own copy: one's edit never leaks


@pytest.mark.slow
def test_checkpoint_arch_and_declared_values_equal_a_full_compose(tmp_path):
    folder = write_model_folder(tmp_path / "ckpt", glm_config())
    composer = PointComposer()
    for point in (["recipe=tiny_grpo", f"model.hf_path={folder}"],
                  ["recipe=tiny_grpo", f"model.hf_path={folder}", "model.arch.hidden_size=128"]):
        got, want = outcome(composer.compose, point), outcome(compose, point)
        assert got == want
    assert want["typed"].model.declared_arch["hidden_size"] == 128
    assert "MODEL006" in {f.id for f in want["findings"]}
    assert composer.hydra_compositions == 2  # the primary and the arch probe, once each


@pytest.mark.parametrize("text", ["algorithm:\n  gamma: [1\n", "algorithm:\n  kl_coef: 0.1\nalgorithm:\n  kl_coef: 0.2\n"])
def test_a_broken_recipe_file_gives_the_full_compose_finding(tmp_path, monkeypatch, text):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "broken.yaml").write_text(text)
    monkeypatch.setenv("LAUNCHER_CONFIG_ROOTS", str(tmp_path))
    composer = PointComposer()
    for point in (["recipe=broken", "trainer.mesh.tp=1"], ["recipe=broken", "trainer.mesh.tp=2"]):
        assert outcome(composer.compose, point) == outcome(compose, point)
    assert composer.hydra_compositions == 1


def test_evaluate_returns_point_composed_and_plan():
    composer = PointComposer()
    point, composed, plan = evaluate(0, ["recipe=dapo_sync", "trainer.mesh.tp=2"], composer)
    assert point.status == "legal" and composed.config.trainer.mesh.tp == 2 and plan.mesh.dp == point.numbers["dp"]
    point, composed, plan = evaluate(1, ["recipe=dapo_sync", "trainer.mesh.tp=abc"], composer)
    assert (point.status, composed, plan) == ("invalid", None, None)
    assert point.first_error.startswith("CFG002 trainer.mesh.tp:")
