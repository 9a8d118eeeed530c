"""`validate` and `plan` as users and tools run them: exit codes, the JSON contract, run files, secrets.

Every call is a fresh `python -m launcher` process from the repository root; `plan` always gets a
temporary run.output_dir so nothing is written into the checkout.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.config.files import available

ROOT = Path(__file__).resolve().parents[3]
RECIPES = sorted(available("recipe"))
FINDING_KEYS = {"id", "severity", "key", "message", "why", "fix"}
REQUIRED_PLAN_KEYS = ["params.total", "params.active", "mesh.dp", "mesh.edp", "mesh.experts_per_gpu",
                      "batch.sequences_per_step", "memory.trainer.weights_gib", "memory.trainer.total_gib",
                      "memory.inference.total_gib", "env"]
SECRET = "abc-7f3e9d1c"
# one error (MESH008) and one warning (INF008) whose id sorts before it
ERROR_AND_WARNING = ["recipe=tiny_grpo", "trainer.mesh.sequence_parallel=true", "inference.concurrency_per_engine=1024"]


def dig(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d[part]
    return d


def assert_contract(payload: dict) -> None:
    assert set(payload) <= {"ok", "findings", "plan", "data"} and {"ok", "findings"} <= set(payload)
    assert isinstance(payload["ok"], bool) and isinstance(payload["findings"], list)
    for f in payload["findings"]:
        assert set(f) == FINDING_KEYS, f
        assert f["severity"] in ("error", "warning", "info") and all(isinstance(v, str) and v for v in f.values())
    assert payload["ok"] == (not any(f["severity"] == "error" for f in payload["findings"]))


@pytest.fixture(scope="module")
def valid_json(cli):
    out = cli("validate", "recipe=tiny_grpo", "--format", "json")
    return out, json.loads(out.stdout)


@pytest.mark.slow
def test_validate_valid_config_exits_0_with_contract(valid_json):
    out, payload = valid_json
    assert out.returncode == 0, out.stdout + out.stderr
    assert_contract(payload)
    assert payload["ok"] is True and [f for f in payload["findings"] if f["severity"] == "error"] == []
    assert isinstance(payload["plan"], dict)


@pytest.mark.slow
def test_validate_json_plan_has_required_keys(cli):
    out = cli("validate", "recipe=dapo_sync", "--format", "json")
    plan = json.loads(out.stdout)["plan"]
    for key in REQUIRED_PLAN_KEYS:
        dig(plan, key)
    assert (dig(plan, "params.total"), dig(plan, "params.active")) == (313_326_816_766, 17_376_726_526)
    assert (dig(plan, "mesh.dp"), dig(plan, "mesh.edp"), dig(plan, "mesh.experts_per_gpu")) == (8, 2, 36)
    assert dig(plan, "batch.sequences_per_step") == 1536
    assert dig(plan, "memory.trainer.weights_gib") == pytest.approx(79.5, rel=0.01)
    assert plan["env"]["FLA_TILELANG"] == "0"


@pytest.mark.slow
def test_validate_invalid_config_exits_1_errors_first(cli):
    out = cli("validate", *ERROR_AND_WARNING, "--format", "json")
    assert out.returncode == 1, out.stdout + out.stderr
    payload = json.loads(out.stdout)
    assert_contract(payload)
    assert payload["ok"] is False
    severities = [f["severity"] for f in payload["findings"]]
    assert "error" in severities and "warning" in severities
    assert severities == sorted(severities, key=lambda s: s != "error")
    ids = [f["id"] for f in payload["findings"]]
    assert ids.index("MESH008") < ids.index("INF008")


def test_validate_text_lists_errors_before_warnings_with_why_and_fix(cli):
    out = cli("validate", *ERROR_AND_WARNING)
    assert out.returncode == 1
    text = out.stdout
    assert "1 error(s), 1 warning(s)" in text
    assert text.index("[ERROR MESH008] trainer.mesh.sequence_parallel") < text.index("[WARNING INF008]")
    assert "why:" in text and "fix:" in text


def test_validate_typo_key_exits_2_as_json(cli):
    out = cli("validate", "recipe=dapo_sync", "trainer.mesh.tpp=2", "--format", "json")
    assert out.returncode == 2
    assert "Traceback" not in out.stdout + out.stderr
    payload = json.loads(out.stdout)
    assert_contract(payload)
    assert "plan" not in payload and payload["ok"] is False
    (finding,) = payload["findings"]
    assert (finding["id"], finding["key"]) == ("CFG001", "trainer.mesh.tpp")
    assert "trainer.mesh.tp" in finding["message"]


def test_plan_typo_key_exits_2_as_json(cli, tmp_path):
    out = cli("plan", "recipe=dapo_sync", "trainer.mesh.tpp=2", "--format", "json", f"run.output_dir={tmp_path}")
    assert out.returncode == 2
    assert json.loads(out.stdout)["findings"][0]["id"] == "CFG001"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_validate_all_covers_every_recipe_and_exits_0(cli):
    out = cli("validate", "--all")
    assert out.returncode == 0, out.stdout
    heads = [line for line in out.stdout.splitlines() if line.startswith("recipe=")]
    assert len(heads) == len(RECIPES)
    for recipe, head in zip(RECIPES, heads, strict=True):
        assert head.startswith(f"recipe={recipe} [{recipe} on ") and ": 0 error(s)" in head


@pytest.mark.slow
def test_validate_all_json_is_one_payload_per_recipe(cli):
    out = cli("validate", "--all", "--format", "json")
    payloads = json.loads(out.stdout)
    assert isinstance(payloads, list) and len(payloads) == len(RECIPES)
    for payload in payloads:
        assert_contract(payload)
    assert out.returncode == (0 if all(p["ok"] for p in payloads) else 1)


def test_plan_with_error_writes_no_run_directory(cli, tmp_path):
    out = cli("plan", "recipe=tiny_grpo", "trainer.mesh.sequence_parallel=true", f"run.output_dir={tmp_path}")
    assert out.returncode == 1
    assert "MESH008" in out.stdout
    assert list(tmp_path.iterdir()) == []


def test_plan_success_writes_config_overrides_and_plan(cli, tmp_path):
    out = cli("plan", "recipe=tiny_grpo", "trainer.mesh.tp=1", f"run.output_dir={tmp_path}")
    assert out.returncode == 0, out.stdout + out.stderr
    run_dir = tmp_path / "tiny_grpo"
    assert {p.name for p in run_dir.iterdir()} == {"config.yaml", "overrides.yaml", "plan.json"}
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["trainer"]["backend"] == "hf" and config["run"]["output_dir"] == str(tmp_path)
    overrides = yaml.safe_load((run_dir / "overrides.yaml").read_text())
    assert "trainer.mesh.tp=1" in overrides["overrides"] and overrides["choices"]["recipe"] == "tiny_grpo"
    plan = json.loads((run_dir / "plan.json").read_text())
    for key in REQUIRED_PLAN_KEYS:
        dig(plan, key)
    assert "# mesh" in out.stdout and "# batch" in out.stdout  # readable tables


@pytest.mark.slow
def test_secret_env_override_needs_plus_prefix(cli):
    """`env` is an open dict that starts empty: a new key needs Hydra's `+`, without it it is a typo (exit 2)."""
    out = cli("validate", "recipe=tiny_grpo", f"env.WANDB_API_KEY={SECRET}", "--format", "json")
    assert out.returncode == 2 and json.loads(out.stdout)["findings"][0]["key"] == "env.WANDB_API_KEY"
    assert SECRET not in out.stdout + out.stderr


@pytest.mark.slow
def test_secret_masked_in_plan_text_and_run_files(cli, tmp_path):
    out = cli("plan", "recipe=tiny_grpo", f"+env.WANDB_API_KEY={SECRET}", f"run.output_dir={tmp_path}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert SECRET not in out.stdout + out.stderr
    files = list((tmp_path / "tiny_grpo").iterdir())
    assert len(files) == 3
    for f in files:
        assert SECRET not in f.read_text(), f.name
    assert "WANDB_API_KEY" in (tmp_path / "tiny_grpo" / "plan.json").read_text()  # the key is kept, masked




@pytest.mark.slow
def test_secret_masked_in_validate_json(cli):
    out = cli("validate", "recipe=tiny_grpo", f"+env.WANDB_API_KEY={SECRET}", "--format", "json")
    assert out.returncode == 0
    assert SECRET not in out.stdout + out.stderr


@pytest.mark.slow
def test_secret_masked_in_plan_json(cli, tmp_path):
    out = cli("plan", "recipe=tiny_grpo", f"+env.WANDB_API_KEY={SECRET}", "--format", "json",
              f"run.output_dir={tmp_path}")
    assert out.returncode == 0
    assert SECRET not in out.stdout + out.stderr


HEAVY = ("torch", "ray", "vllm", "megatron", "transformers")
IMPORT_PROBE = f"""
import contextlib, io, json, sys
from launcher.config.compose import compose
from launcher.plan import make_plan
from launcher.validate import check
composed = compose(["recipe=dapo_sync", "trainer.mesh.cp=2"])
check(composed.config, make_plan(composed.config))
from launcher.__main__ import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["validate", "--all", "--format", "json"])
    main(["plan", "recipe=dapo_sync", "--format", "json", "trainer.mesh.pp=2"])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})))
"""


@pytest.mark.slow
def test_compose_plan_validate_import_no_heavy_stack():
    out = subprocess.run([sys.executable, "-c", IMPORT_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
