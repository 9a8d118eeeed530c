"""The CLI as users run it: exit codes, no traceback, no run directory on bad input, masking."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def run_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [["trainer.mesh.tpp=2"], ["trainer.mesh.tp=x"], ["recipe=nope"], ["trainer.mesh.tp"]])
def test_bad_input_exits_2_without_traceback_or_run_dir(tmp_path, overrides):
    out = run_cli("plan", *overrides, f"run.output_dir={tmp_path}")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr + out.stdout
    assert "fix:" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_unknown_flag_is_a_usage_error():
    out = run_cli("plan", "--frobnicate")
    assert out.returncode == 2 and "unknown flag" in out.stderr


def test_cfg_job_prints_config_and_masks_secrets(tmp_path):
    out = run_cli("--cfg", "job", "recipe=dapo_async", "+env.HF_TOKEN=hunter2", f"run.output_dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    assert "hf_path" in out.stdout and "HF_TOKEN: '***'" in out.stdout
    assert "hunter2" not in out.stdout
    assert list(tmp_path.iterdir()) == []


def test_plan_writes_resolved_config_and_overrides(tmp_path):
    out = run_cli("plan", "recipe=dapo_async", f"run.output_dir={tmp_path}", "+env.WANDB_API_KEY=s3cret")
    assert out.returncode == 0, out.stderr
    run_dir = tmp_path / "dapo_async"
    assert {p.name for p in run_dir.iterdir()} == {"config.yaml", "overrides.yaml", "plan.json"}
    written = "".join(p.read_text() for p in run_dir.iterdir())
    assert "s3cret" not in written + out.stdout + out.stderr
    assert "recipe: dapo_async" in (run_dir / "overrides.yaml").read_text()


def test_help_exits_0():
    out = run_cli("--help")
    assert out.returncode == 0 and "validate" in out.stdout
