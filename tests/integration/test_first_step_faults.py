"""Held-out style: each fault a run's first step would hit, injected into one otherwise valid
run (issue 30's verl-format story on the tiny checkpoint fixture), is reported by `validate`
(rule id and key, in its JSON), and `python -m launcher` refuses it with exit 1 before Ray
starts, leaving no run directory behind.

    every prompt too long                         DATA007  data.max_prompt_len
    an answer column that is all null             DATA009  data.answer_key
    a tokenizer without the generation EOS id     MODEL008 model.hf_path
    a reward module that raises on import         DATA010  data.reward_fn
    a checkpoint shard with a wrong shape         MODEL009 model.hf_path

Subprocess launchers, so marked slow."""
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow
REWARD_MODULE = "first_step_reward_raises"


def _story(file: Path, answer: str | None) -> Path:
    pq.write_table(pa.Table.from_pylist([
        {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "what is 3 plus 4?"}],
         "ability": "math", "reward_model": {"style": "rule", "ground_truth": answer}, "extra_info": {"index": i}}
        for i in range(64)]), file)
    return file


def _without_token(checkpoint: Path, folder: Path, token_id: int) -> Path:
    """A copy of the checkpoint whose tokenizer lacks `token_id` (its generation config still ends on it)."""
    shutil.copytree(checkpoint, folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] != token_id]
    data["model"]["vocab"] = {k: v for k, v in data["model"]["vocab"].items() if v != token_id}
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder


def _misshaped(checkpoint: Path, folder: Path) -> Path:
    """A copy of the checkpoint with one routed expert's up_proj cut to 60 of its 64 columns."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(checkpoint, folder)
    name = "model.language_model.layers.1.mlp.experts.3.up_proj.weight"
    shard = folder / json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"][name]
    tensors = load_file(shard)
    tensors[name] = tensors[name][:, :60].copy()
    save_file(tensors, shard, metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def story(tiny_glm_checkpoint, tmp_path_factory):
    """(base overrides as key -> value, fault -> (changed keys, rule id, key), folder of the reward module)."""
    root = tmp_path_factory.mktemp("faults")
    (root / f"{REWARD_MODULE}.py").write_text("raise ImportError('the scoring library is not installed here')\n"
                                             "def compute_score(data_source, solution_str, ground_truth, "
                                             "extra_info=None):\n    return 1.0\n")
    eos_id = json.loads((tiny_glm_checkpoint / "generation_config.json").read_text())["eos_token_id"][-1]
    base = {"recipe": "tiny_grpo", "model": "tiny", "model.hf_path": str(tiny_glm_checkpoint), "data.task": "gsm8k",
            "data.train_path": str(_story(root / "story.parquet", "7")), "data.prompt_key": "prompt",
            "data.answer_key": "reward_model.ground_truth", "data.max_prompt_len": "96",
            "inference.max_model_len": "128", "run.steps": "2"}
    faults = {
        "prompts_too_long": ({"data.max_prompt_len": "48"}, "DATA007", "data.max_prompt_len"),
        "answers_null": ({"data.train_path": str(_story(root / "null.parquet", None))}, "DATA009", "data.answer_key"),
        "eos_unknown": ({"model.hf_path": str(_without_token(tiny_glm_checkpoint, root / "no_eos", eos_id))},
                        "MODEL008", "model.hf_path"),
        "reward_raises": ({"data.reward_fn": f"{REWARD_MODULE}:compute_score"}, "DATA010", "data.reward_fn"),
        "shard_shape": ({"model.hf_path": str(_misshaped(tiny_glm_checkpoint, root / "misshaped"))}, "MODEL009",
                        "model.hf_path"),
    }
    return base, faults, root


FAULTS = ["prompts_too_long", "answers_null", "eos_unknown", "reward_raises", "shard_shape"]


def _overrides(values: dict) -> list[str]:
    return [f"{k}={v}" for k, v in values.items()]


@pytest.fixture
def on_path(story, monkeypatch):
    """The reward module's folder on PYTHONPATH, as a user's would be (validate and run inherit it)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(story[2]), os.environ.get("PYTHONPATH")])))


def test_the_story_without_a_fault_validates(story, cli, on_path):
    out = cli("validate", *_overrides(story[0]), "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert [f for f in json.loads(out.stdout)["findings"] if f["severity"] == "error"] == []


@pytest.mark.parametrize("fault", FAULTS)
def test_validate_reports_the_fault(story, cli, on_path, fault):
    base, faults, _ = story
    changed, rule, key = faults[fault]
    out = cli("validate", *_overrides({**base, **changed}), "--format", "json")
    assert out.returncode == 1, out.stdout + out.stderr
    errors = [(f["id"], f["key"]) for f in json.loads(out.stdout)["findings"] if f["severity"] == "error"]
    assert (rule, key) in errors, errors


@pytest.mark.parametrize("fault", FAULTS)
def test_the_run_refuses_before_ray_and_writes_no_run_dir(story, launch_run, on_path, fault):
    base, faults, _ = story
    changed, rule, _ = faults[fault]
    run = launch_run(fault, _overrides({**base, **changed}))
    code, out, err = run.finish(timeout_s=120)
    assert code == 1, out[-2000:] + err[-3000:]
    assert run.daemons == {}, f"Ray started: {run.daemons}"
    assert "refusing to start: " in err and rule in err and "Traceback" not in err, err[-3000:]
    assert not run.dir.exists(), sorted(p.name for p in run.dir.iterdir())
