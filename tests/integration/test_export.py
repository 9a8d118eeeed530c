"""`python -m launcher export`: a trained run's checkpoint -> an HF folder that
`from_pretrained` loads with the trainer's own log-probs, or a PEFT adapter folder.

Runs start from the tiny glm5_next checkpoint fixture (transformers' `save_pretrained`).
"""
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.contract.spec import ActorSpec

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHORT = ["run.steps=2", "checkpoint.every_steps=2", "algorithm.prompts_per_step=4", "algorithm.mini_batch_prompts=4",
         "algorithm.samples_per_prompt=8", "trainer.optimizer.lr=0.02"]
LORA = ["trainer.lora.rank=4", "trainer.lora.alpha=8",
        "trainer.lora.targets=[linear_proj,q_proj,f_a_proj,linear_fc1,linear_fc2]"]
"""Attention, KDA and the MLPs: dense, shared and routed experts (per expert in the adapter folder)."""


def _launcher(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def _train(tmp_path: Path, name: str, overrides: list[str]) -> tuple[Path, list[str]]:
    args = ["recipe=tiny_grpo", f"run.output_dir={tmp_path}", f"run.name={name}", *SHORT, *overrides]
    done = _launcher(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp_path / name / "checkpoints" / "step_000002", args


def _export(checkpoint: Path, out: Path, *flags: str) -> None:
    done = _launcher("export", str(checkpoint), str(out), *flags)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (out.parent / f".{out.name}.partial").exists()


IDS = [7, 30, 20, 22, 26, 9, 15, 40, 33, 12, 11, 50]


def _hf_logprobs(model) -> torch.Tensor:
    ids = torch.tensor([IDS])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]


def _trainer_logprobs(trainer) -> torch.Tensor:
    """The trainer's own log-probs of IDS (the values it trains on)."""
    from launcher.contract.messages import TrainShard

    shard = TrainShard(sequences=[IDS], prompt_lens=[1], advantages=[0.0], tokens_in_mini_batch=len(IDS) - 1,
                       seqs_in_mini_batch=1)
    return torch.tensor(trainer.logprobs(shard)[0])


def _loaded_trainer(args: list[str], checkpoint: Path):
    from launcher.config.compose import compose
    from launcher.workers import trainer_class
    from launcher.workers.rendezvous import free_address

    cfg = compose([a for a in args if not a.startswith("run.")]).config
    trainer = trainer_class(cfg.trainer.backend.value)(ActorSpec.planned(cfg, 0, 1))
    trainer.init_distributed(*free_address())
    trainer.load_checkpoint(str(checkpoint / "trainer"))
    return trainer


@pytest.mark.parametrize("backend", ["megatron", "hf"])
def test_lora_run_exports_merged_and_adapter_folders(tiny_glm_checkpoint, tmp_path, backend):
    """Both trainers' exports agree: the merged folder and the PEFT adapter folder (routed
    experts per expert, loaded through peft's target_parameters) give the trainer's log-probs."""
    from peft import PeftModel
    from transformers.models.glm5_next import Glm5NextForConditionalGeneration as Glm

    checkpoint, args = _train(tmp_path, f"{backend}_lora", [f"trainer.backend={backend}",
                                                            f"model.hf_path={tiny_glm_checkpoint}", *LORA])
    _export(checkpoint, tmp_path / "merged")
    _export(checkpoint, tmp_path / "adapter", "--adapter")
    want = _trainer_logprobs(_loaded_trainer(args, checkpoint))
    merged = _hf_logprobs(Glm.from_pretrained(tmp_path / "merged").eval())
    adapted = _hf_logprobs(PeftModel.from_pretrained(Glm.from_pretrained(tiny_glm_checkpoint), tmp_path / "adapter").eval())
    base = _hf_logprobs(Glm.from_pretrained(tiny_glm_checkpoint).eval())
    assert (merged - base).abs().max() > 1e-3  # the run trained: the export is not the base
    assert torch.allclose(merged, want, atol=1e-4), (merged - want).abs().max()
    assert torch.allclose(adapted, merged, atol=1e-5), (adapted - merged).abs().max()


def test_hf_run_export_is_the_trainers_model(tiny_glm_checkpoint, tmp_path):
    from safetensors import safe_open
    from transformers.models.glm5_next import Glm5NextForConditionalGeneration as Glm

    checkpoint, args = _train(tmp_path, "hf_full", [f"model.hf_path={tiny_glm_checkpoint}"])
    out = tmp_path / "export"
    _export(checkpoint, out)
    base_names = set(safe_open(str(next(tiny_glm_checkpoint.glob("*.safetensors"))), "pt").keys())
    names = {k for f in out.glob("*.safetensors") for k in safe_open(str(f), "pt").keys()}
    assert base_names <= names and (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()
    exported = _hf_logprobs(Glm.from_pretrained(out).eval())
    assert torch.equal(exported, _hf_logprobs(_loaded_trainer(args, checkpoint).model.eval()))


def test_export_refuses_a_non_empty_output_and_an_incomplete_checkpoint(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    (tmp_path / "step_000001").mkdir()
    done = _launcher("export", str(tmp_path / "step_000001"), str(tmp_path / "out"))
    assert done.returncode == 2 and "not a complete training checkpoint" in done.stderr
    (tmp_path / "step_000001" / "COMPLETE").write_text("")
    (tmp_path / "step_000001" / "trainer").mkdir()
    done = _launcher("export", str(tmp_path / "step_000001"), str(tmp_path / "out"))
    assert done.returncode == 2 and "exists and is not empty" in done.stderr
