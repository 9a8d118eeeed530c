"""With model.hf_path set, the checkpoint's config.json is the architecture.

Composition copies config.json into model.arch (text_config for glm5_next, top level for
qwen3), MODEL006 names every model.arch value that disagrees with it, and MODEL003 names
each file that would stop the trainer loading the folder (config.json, the model type, the
weight index, a shard), all before anything starts. Most folders here are JSON only (config,
index, empty shard files: what the rules read); the last tests use the real tiny checkpoints.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.config.model_folder import read_arch, weight_problems
from launcher.config.schema.model import ArchConfig
from launcher.plan import make_plan
from launcher.plan.params import count_params
from launcher.validate import check
from tests.shared_compose import compose_shipped

ROOT = Path(__file__).resolve().parents[3]
SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
# A descriptor that leaves `arch` out: with hf_path set the checkpoint supplies it.
BARE_DESCRIPTOR = "name: bare\nhf_path: null\nlanguage_model_only: true\ndtype: float32\n"


def descriptor_arch(name: str) -> dict:
    return yaml.safe_load((ROOT / "model" / "descriptors" / f"{name}.yaml").read_text())["arch"]


def glm_config(**text_overrides) -> dict:
    """config.json as save_pretrained writes glm5_next: text fields under text_config."""
    text = {k: v for k, v in descriptor_arch("tiny").items() if k != "model_type"}
    text.update(model_type="glm5_next_text", head_dim=0, tie_word_embeddings=False, **text_overrides)
    return {"model_type": "glm5_next", "text_config": text, "vision_config": {"depth": 1},
            "tie_word_embeddings": False}


def qwen3_config(**overrides) -> dict:
    """config.json of a plain qwen3: fields at the top level, no GLM-only fields."""
    glm_only = {"n_routed_experts", "num_experts_per_tok", "n_shared_experts", "hc_mult"}
    config = {k: v for k, v in descriptor_arch("tiny_qwen3").items() if k not in glm_only}
    config["layer_types"] = ["full_attention"] * config["num_hidden_layers"]
    return {**config, **overrides}


def write_model_folder(folder: Path, config: dict | str | None) -> Path:
    """config.json (a dict, raw text, or None for none), an index naming two shards, and the shards."""
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    index = {"metadata": {}, "weight_map": {"a.weight": SHARDS[0], "b.weight": SHARDS[1], "c.weight": SHARDS[1]}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    for shard in SHARDS:
        (folder / shard).write_bytes(b"")
    return folder


@pytest.fixture
def bare_descriptor(tmp_path, monkeypatch) -> str:
    """`model=bare` (no arch) through an extra config root."""
    folder = tmp_path / "roots" / "model" / "descriptors"
    folder.mkdir(parents=True)
    (folder / "bare.yaml").write_text(BARE_DESCRIPTOR)
    monkeypatch.setenv("LAUNCHER_CONFIG_ROOTS", str(tmp_path / "roots"))
    return "model=bare"


def validate(*overrides: str):
    composed = compose_shipped(list(overrides))
    plan = make_plan(composed.config, driver_env={})
    return composed, plan, check(composed.config, plan)


def of(findings, rule_id: str) -> list:
    return [f for f in findings if f.id == rule_id]


# --------------------------------------------------------------------------- reading config.json

def test_glm5_next_fields_come_from_text_config(tmp_path):
    ckpt = read_arch(write_model_folder(tmp_path, glm_config(hidden_size=96)))
    assert ckpt.section == "text_config" and ckpt.model_type == "glm5_next"
    assert ckpt.values["hidden_size"] == 96 and ckpt.values["model_type"] == "glm5_next"  # not glm5_next_text
    assert ckpt.implied == frozenset() and ckpt.wrong_type == {}


def test_qwen3_fields_come_from_the_top_level_and_glm_features_are_off(tmp_path):
    ckpt = read_arch(write_model_folder(tmp_path, qwen3_config()))
    assert ckpt.section == "" and ckpt.values["head_dim"] == 64
    assert {k: ckpt.values[k] for k in ("n_routed_experts", "hc_mult", "swiglu_limit")} == {
        "n_routed_experts": 0, "hc_mult": 1, "swiglu_limit": None}
    assert "hc_mult" in ckpt.implied and "hidden_size" not in ckpt.implied


# --------------------------------------------------------------------------- composition

@pytest.mark.slow
def test_compose_takes_every_arch_field_from_config_json(tmp_path, bare_descriptor):
    folder = write_model_folder(tmp_path / "ckpt", glm_config(intermediate_size=96, moe_intermediate_size=16))
    composed, plan, findings = validate("recipe=tiny_grpo", bare_descriptor, f"model.hf_path={folder}")
    arch = composed.config.model.arch
    assert (arch.hidden_size, arch.intermediate_size, arch.moe_intermediate_size) == (64, 96, 16)
    assert (arch.n_routed_experts, arch.index_kpool, arch.layer_types) == (8, 4, descriptor_arch("tiny")["layer_types"])
    assert composed.cfg.model.arch.intermediate_size == 96  # the printed / written config says the same
    expected = ArchConfig(**{**descriptor_arch("tiny"), "intermediate_size": 96, "moe_intermediate_size": 16,
                             "head_dim": 0})
    assert plan.params.total == count_params(expected).total
    # The fixture's shards are empty files: MODEL009 reads their headers and says so; nothing else errs.
    assert [f.id for f in findings if f.severity == "error"] == ["MODEL009"] * 2


@pytest.mark.slow
def test_unset_arch_fields_are_no_disagreement(tmp_path, bare_descriptor):
    """The bare descriptor leaves every field at the schema default (hidden_size 4096): none counts."""
    folder = write_model_folder(tmp_path / "ckpt", glm_config())
    composed, _, findings = validate("recipe=tiny_grpo", bare_descriptor, f"model.hf_path={folder}")
    assert composed.config.model.declared_arch == {}
    assert of(findings, "MODEL006") == []


@pytest.mark.slow
def test_declared_values_equal_to_the_checkpoint_pass(tmp_path):
    folder = write_model_folder(tmp_path, glm_config())
    composed, _, findings = validate("recipe=tiny_grpo", f"model.hf_path={folder}")
    assert composed.config.model.declared_arch["hidden_size"] == 64
    assert of(findings, "MODEL006") == [] and of(findings, "MODEL003") == []


@pytest.mark.slow
def test_null_schedule_claims_nothing(tmp_path):
    """layer_types=null means HF's default schedule: not a disagreement with the listed one."""
    folder = write_model_folder(tmp_path, glm_config())
    composed, _, findings = validate("recipe=tiny_grpo", f"model.hf_path={folder}", "model.arch.layer_types=null")
    assert of(findings, "MODEL006") == []
    assert composed.config.model.arch.layer_types == descriptor_arch("tiny")["layer_types"]


@pytest.mark.slow
def test_override_that_disagrees_is_model006_naming_both_values(tmp_path):
    folder = write_model_folder(tmp_path, glm_config())
    composed, _, findings = validate("recipe=tiny_grpo", f"model.hf_path={folder}", "model.arch.hidden_size=128")
    (f,) = of(findings, "MODEL006")
    assert (f.severity, f.key) == ("error", "model.arch.hidden_size")
    assert "hidden_size: descriptor 128 vs checkpoint 64" in f.message and str(folder / "config.json") in f.message
    assert "checkpoint's config is the architecture" in f.fix and "hidden_size" in f.fix
    assert composed.config.model.arch.hidden_size == 64  # the planner sees the checkpoint's width


@pytest.mark.slow
def test_every_differing_field_is_listed(tmp_path):
    folder = write_model_folder(tmp_path, glm_config())
    _, _, findings = validate("recipe=tiny_grpo", f"model.hf_path={folder}", "model.arch.hidden_size=128",
                              "model.arch.index_kpool=8")
    (f,) = of(findings, "MODEL006")
    assert f.key == "model.arch" and "in 2 field(s)" in f.message
    assert "index_kpool: descriptor 8 vs checkpoint 4" in f.message and "descriptor 128 vs checkpoint 64" in f.message


@pytest.mark.slow
def test_glm_descriptor_against_a_qwen3_checkpoint_names_the_missing_features(tmp_path):
    folder = write_model_folder(tmp_path, qwen3_config())
    composed, _, findings = validate("recipe=tiny_grpo", f"model.hf_path={folder}")
    (f,) = of(findings, "MODEL006")
    assert "model_type: descriptor 'glm5_next' vs checkpoint 'qwen3'" in f.message
    assert "hc_mult: descriptor 4 vs checkpoint 1 (config.json has no hc_mult: qwen3 has none)" in f.message
    assert of(findings, "MODEL004") == []  # the descriptor's GLM schedules do not survive either
    assert composed.config.model.arch.hc_mult == 1


@pytest.mark.slow
def test_qwen3_descriptor_with_its_checkpoint_passes(tmp_path):
    folder = write_model_folder(tmp_path, qwen3_config())
    _, _, findings = validate("recipe=tiny_qwen3_vllm", f"model.hf_path={folder}")
    assert of(findings, "MODEL006") == [] and of(findings, "MODEL003") == []


# --------------------------------------------------------------------------- MODEL003: the folder loads

def model003(folder: Path, *overrides: str) -> list:
    return of(validate("recipe=tiny_grpo", f"model.hf_path={folder}", *overrides)[2], "MODEL003")


def test_missing_folder_names_it(tmp_path):
    (f,) = model003(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in f.message and "config.json" in f.message and f.key == "model.hf_path"


@pytest.mark.slow
def test_missing_config_json_names_the_file(tmp_path):
    (f,) = model003(write_model_folder(tmp_path, None))
    assert f"{tmp_path / 'config.json'} does not exist" in f.message and f.severity == "error"


def test_bad_json_names_the_file_and_line(tmp_path):
    (f,) = model003(write_model_folder(tmp_path, '{"model_type": "glm5_next",\n  "text_config": {'))
    assert str(tmp_path / "config.json") in f.message and "is not valid JSON" in f.message and "line 2" in f.message


@pytest.mark.slow
def test_unknown_model_type_names_the_file(tmp_path):
    (f,) = model003(write_model_folder(tmp_path, qwen3_config(model_type="no_such_model")))
    assert str(tmp_path / "config.json") in f.message and "model_type='no_such_model'" in f.message


@pytest.mark.slow
def test_megatron_builds_only_glm5_next(tmp_path):
    folder = write_model_folder(tmp_path, qwen3_config())
    (f,) = model003(folder, "trainer.backend=megatron")
    assert "model_type='qwen3'" in f.message and "trainer.backend=megatron" in f.message
    assert model003(folder) == []  # the hf trainer builds qwen3


def test_wrongly_typed_field_names_file_and_field(tmp_path):
    (f,) = model003(write_model_folder(tmp_path, glm_config(hidden_size="wide")))
    assert "text_config.hidden_size='wide', not int" in f.message and str(tmp_path / "config.json") in f.message


@pytest.mark.slow
def test_missing_index_names_it(tmp_path):
    folder = write_model_folder(tmp_path, glm_config())
    (folder / "model.safetensors.index.json").unlink()
    (f,) = model003(folder)
    assert str(folder / "model.safetensors.index.json") in f.message and "model.safetensors" in f.message


@pytest.mark.slow
def test_single_safetensors_file_needs_no_index(tmp_path):
    folder = write_model_folder(tmp_path, glm_config())
    (folder / "model.safetensors.index.json").unlink()
    (folder / "model.safetensors").write_bytes(b"")
    assert model003(folder) == []


@pytest.mark.slow
def test_index_naming_an_absent_shard_names_the_shard(tmp_path):
    folder = write_model_folder(tmp_path, glm_config())
    (folder / SHARDS[1]).unlink()
    (f,) = model003(folder)
    assert str(folder / "model.safetensors.index.json") in f.message and SHARDS[1] in f.message
    assert SHARDS[0] not in f.message and "1 of 2" in f.message


@pytest.mark.slow
def test_unreadable_index_names_it(tmp_path):
    folder = write_model_folder(tmp_path, glm_config())
    (folder / "model.safetensors.index.json").write_text("{not json")
    assert weight_problems(folder)[0][0] == folder / "model.safetensors.index.json"
    (f,) = model003(folder)
    assert "is not valid JSON" in f.message


def _damage(kind: str, folder: Path) -> None:
    if kind == "no_config":
        (folder / "config.json").unlink()
    elif kind == "bad_json":
        (folder / "config.json").write_text("{")
    elif kind == "unknown_type":
        (folder / "config.json").write_text(json.dumps(qwen3_config(model_type="no_such_model")))
    elif kind == "no_index":
        (folder / "model.safetensors.index.json").unlink()
    elif kind == "missing_shard":
        (folder / SHARDS[0]).unlink()


DAMAGE = {"no_config": "config.json", "bad_json": "config.json", "unknown_type": "config.json",
          "no_index": "model.safetensors.index.json", "missing_shard": SHARDS[0]}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(DAMAGE))
def test_validate_json_exits_1_naming_the_file(cli, tmp_path, kind):
    folder = write_model_folder(tmp_path, glm_config())
    _damage(kind, folder)
    out = cli("validate", "recipe=tiny_grpo", f"model.hf_path={folder}", "--format", "json")
    assert out.returncode == 1, out.stdout + out.stderr
    payload = json.loads(out.stdout)
    messages = [f["message"] for f in payload["findings"] if f["id"] == "MODEL003" and f["severity"] == "error"]
    assert payload["ok"] is False and any(DAMAGE[kind] in m for m in messages), messages


@pytest.mark.slow
def test_checking_a_checkpoint_imports_no_heavy_stack(tmp_path):
    """validate/ and the config reader stay torch-free (the house rule: validation < 1 s anywhere)."""
    folder = write_model_folder(tmp_path, glm_config())
    code = ("import sys\nfrom launcher.config.compose import compose\nfrom launcher.plan import make_plan\n"
            "from launcher.validate import check\n"
            f"c = compose(['recipe=tiny_grpo', 'model.hf_path={folder}'])\ncheck(c.config, make_plan(c.config))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'ray', 'vllm', "
            "'megatron')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- the real tiny checkpoints

@pytest.mark.slow
def test_plan_params_come_from_the_real_checkpoint(cli, tiny_glm_checkpoint, bare_descriptor, tmp_path):
    """`plan recipe=tiny_grpo model=bare model.hf_path=<fixture>`: the plan's model is the checkpoint's."""
    out = cli("plan", "recipe=tiny_grpo", bare_descriptor, f"model.hf_path={tiny_glm_checkpoint}",
              f"run.output_dir={tmp_path / 'runs'}", "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    plan = json.loads(out.stdout)["plan"]
    config = json.loads((tiny_glm_checkpoint / "config.json").read_text())["text_config"]
    arch = ArchConfig(**{k: v for k, v in config.items() if k in ArchConfig.__dataclass_fields__ and k != "model_type"})
    assert plan["params"]["total"] == count_params(arch).total
    assert plan["params"]["total"] != count_params(ArchConfig()).total  # not the schema's GLM-5.3-Flash default
    assert plan["arch"]["layer_types"] == config["layer_types"]


@pytest.mark.slow
def test_real_checkpoints_pass_with_their_descriptors(point, tiny_glm_checkpoint, tiny_qwen3_checkpoint):
    for recipe, folder in (("tiny_grpo", tiny_glm_checkpoint), ("tiny_qwen3_vllm", tiny_qwen3_checkpoint)):
        p = point(f"recipe={recipe}", f"model.hf_path={folder}")
        assert p.of("MODEL003") == [] and p.of("MODEL006") == [], p.findings


def test_real_checkpoint_64_wide_against_128_override(point, tiny_glm_checkpoint):
    p = point("recipe=tiny_grpo", f"model.hf_path={tiny_glm_checkpoint}", "model.arch.hidden_size=128")
    (f,) = p.of("MODEL006")
    assert "hidden_size: descriptor 128 vs checkpoint 64" in f.message
    assert p.cfg.model.arch.hidden_size == 64


def test_real_checkpoint_missing_a_shard_names_it(tiny_qwen3_checkpoint, tmp_path):
    folder = Path(shutil.copytree(tiny_qwen3_checkpoint, tmp_path / "ckpt"))
    shards = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"].values()
    gone = sorted(set(shards))[2]
    (folder / gone).unlink()
    (f,) = of(validate("recipe=tiny_qwen3_vllm", f"model.hf_path={folder}")[2], "MODEL003")
    assert gone in f.message and "model.safetensors.index.json" in f.message


@pytest.mark.parametrize(("written", "experts"), [
    ({"num_experts": 128}, 128),        # released Qwen3-30B-A3B config.json
    ({"num_local_experts": 8}, 8),      # transformers 5.25's save_pretrained (attribute_map)
    ({}, 128),                          # save_pretrained leaves a default out: the class default
])
def test_a_qwen3_moe_folder_reads_as_moe(tmp_path, written, experts):
    """config.json names the routed experts its own way and places them by decoder_sparse_step and
    mlp_only_layers; read as the schema's n_routed_experts and mlp_layer_types, or the model plans dense."""
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe", "num_hidden_layers": 4,
                                                      "decoder_sparse_step": 2, "mlp_only_layers": [3], **written}))
    values = read_arch(tmp_path).values
    assert values["n_routed_experts"] == experts and "n_routed_experts" not in read_arch(tmp_path).implied
    assert values["mlp_layer_types"] == ["dense", "sparse", "dense", "dense"]
