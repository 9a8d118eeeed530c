"""Issue 21, config side: duplicate YAML keys, masking of secrets only, and the saved config round trip."""
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from launcher.config.compose import compose
from launcher.driver.rundir import write_run_files
from launcher.errors import ConfigError
from launcher.secrets import MASK, is_secret_name, mask_override, mask_secrets

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
    local = yaml.safe_load((Path(__file__).parents[2] / "clusters/local.yaml").read_text())
    text = yaml.safe_dump(local, sort_keys=False) + f"nodes: {local.get('nodes', 1)}\n"
    (clusters / "dupc.yaml").write_text(text)
    monkeypatch.setenv("LAUNCHER_CONFIG_ROOTS", str(tmp_path))
    f = _finding(["recipe=tiny_grpo", "cluster=dupc"])
    assert f.id == "CFG006" and "dupc.yaml" in f.message and "`nodes`" in f.message


@pytest.mark.parametrize("name", ["WANDB_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
                                  "MYPASSWORDFILE", "CLIENT_SECRET", "OPENAI_API_KEY", "SSH_KEY"])
def test_secret_env_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["num_key_value_heads", "prompt_key", "answer_key", "tokens_per_step",
                                  "max_tokens_per_microbatch", "dsa_cache_kib_per_token", "CUDA_HOME",
                                  "TOKENIZERS_PARALLELISM", "KEYBOARD_LAYOUT"])
def test_not_secret_names(name):
    if name.isupper():
        assert not is_secret_name(name)
    tree = {"data": {name: "v"}, "plan": [{name: 1}]}
    assert mask_secrets(tree) == tree
    assert mask_override(f"data.{name}=v") == f"data.{name}=v"


def test_masking_env_entries_and_env_shaped_keys():
    tree = {"env": {"HF_TOKEN": "x", "CUDA_HOME": "/c", "hf_token": "y"}, "runtime": {"env_vars": {"A_KEY": "z"}},
            "flat": {"WANDB_API_KEY": "w", "EMPTY_TOKEN": ""}}
    assert mask_secrets(tree) == {"env": {"HF_TOKEN": MASK, "CUDA_HOME": "/c", "hf_token": MASK},
                                  "runtime": {"env_vars": {"A_KEY": MASK}},
                                  "flat": {"WANDB_API_KEY": MASK, "EMPTY_TOKEN": ""}}
    assert mask_override("+env.HF_TOKEN=abc") == f"+env.HF_TOKEN={MASK}"
    assert mask_override("++env.hf_token=abc") == f"++env.hf_token={MASK}"


def test_saved_config_composes_to_the_same_config(tmp_path):
    """config.yaml + overrides.yaml of a run reproduce it; schema fields named *key*/*token* stay readable."""
    from launcher.plan import make_plan

    overrides = ["recipe=dapo_sync", f"run.output_dir={tmp_path}", "+env.HF_TOKEN=hunter2", "data.prompt_key=q.text"]
    composed = compose(overrides)
    run_dir = write_run_files(composed, make_plan(composed.config).to_dict())
    text = (run_dir / "config.yaml").read_text() + (run_dir / "plan.json").read_text()
    assert "hunter2" not in text
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["env"]["HF_TOKEN"] == MASK
    arch = saved["model"]["arch"]
    assert arch["num_key_value_heads"] == composed.config.model.arch.num_key_value_heads
    assert saved["trainer"]["max_tokens_per_microbatch"] == composed.config.trainer.max_tokens_per_microbatch
    assert saved["data"]["prompt_key"] == "q.text" and saved["data"]["answer_key"] == composed.config.data.answer_key
    plan = yaml.safe_load((run_dir / "plan.json").read_text())
    assert isinstance(plan["batch"]["tokens_per_step"], int)
    # round trip: the saved overrides recompose to exactly the saved config (the secret as given again)
    saved_overrides = yaml.safe_load((run_dir / "overrides.yaml").read_text())["overrides"]
    again = compose([o.replace(MASK, "hunter2") for o in saved_overrides])
    expected = OmegaConf.to_container(again.cfg, resolve=True, enum_to_str=True)
    expected["env"]["HF_TOKEN"] = MASK
    assert expected == saved
