"""Issue 30's story end to end: a verl-format parquet whose 64 prompts are all longer than
data.max_prompt_len=48 is refused in seconds, before Ray starts: by validate's data pre-flight
(no run directory written), and with the pre-flight off by the run's own data load (still
before Ray). Subprocess launchers, so marked slow."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _story(tmp_path: Path, checkpoint: Path) -> list[str]:
    file = tmp_path / "verl_gsm8k.parquet"
    pq.write_table(pa.Table.from_pylist([
        {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "what is 3 plus 4?"}],
         "ability": "math", "reward_model": {"style": "rule", "ground_truth": "7"}, "extra_info": {"index": i}}
        for i in range(64)]), file)
    return ["recipe=tiny_grpo", "model=tiny", f"model.hf_path={checkpoint}", "data.task=gsm8k",
            f"data.train_path={file}", "data.prompt_key=prompt", "data.answer_key=reward_model.ground_truth",
            "data.max_prompt_len=48"]


@pytest.mark.slow
def test_validate_reports_the_story_with_file_numbers_and_fix(tmp_path, tiny_glm_checkpoint, cli):
    out = cli("validate", *_story(tmp_path, tiny_glm_checkpoint), "--format", "json")
    assert out.returncode == 1, out.stdout + out.stderr
    payload = json.loads(out.stdout)
    (found,) = [f for f in payload["findings"] if f["id"] == "DATA007"]
    assert found["key"] == "data.max_prompt_len" and "64 of 64 sampled prompts" in found["message"]
    assert "verl_gsm8k.parquet" in found["message"] and "data.max_prompt_len=48" in found["message"]
    assert payload["data"]["files"][0]["rows_sampled"] == 64
    assert payload["data"]["files"][0]["longer_than_max_prompt_len"] == 64


@pytest.mark.slow
@pytest.mark.parametrize("preflight", ["on", "off"])
def test_run_refuses_before_ray(tmp_path, tiny_glm_checkpoint, launch_run, preflight):
    """on: validate's pre-flight refuses (no run dir); off (data.preflight_rows=0): the run's data
    load before Ray refuses with its DataError's message, exit 1, no traceback, no Ray daemon, and
    removes the run directory it had just written."""
    extra = [] if preflight == "on" else ["data.preflight_rows=0"]
    started = time.monotonic()
    run = launch_run("story", [*_story(tmp_path, tiny_glm_checkpoint), "run.steps=2", *extra])
    code, out, err = run.finish(timeout_s=120)
    seconds = time.monotonic() - started
    assert code == 1, out + err
    assert run.daemons == {}, f"Ray started: {run.daemons}"
    assert "embedded Ray" not in out and "Traceback" not in err, out + err
    assert seconds < 60, seconds
    if preflight == "on":
        assert "DATA007" in err and "no prompt fits" in err
    else:
        assert "refusing to start" in err and "no prompt left: 64 of 64 are longer than data.max_prompt_len=48" in err
        assert f"found before Ray started; nothing was run; removed {run.dir}" in err
    assert not run.dir.exists(), sorted(p.name for p in run.dir.iterdir())


@pytest.mark.slow
def test_a_refused_start_keeps_an_earlier_runs_directory(tmp_path, tiny_glm_checkpoint, launch_run):
    """What an earlier run left (its metrics, checkpoints) is never removed with a refusal."""
    story = _story(tmp_path, tiny_glm_checkpoint)
    (tmp_path / "story").mkdir()  # the run directory launch_run("story") uses
    (tmp_path / "story" / "metrics.jsonl").write_text("{}\n")
    run = launch_run("story", [*story, "run.steps=2", "data.preflight_rows=0"])
    code, _, err = run.finish(timeout_s=120)
    assert code == 1 and "nothing was run)" in err, err[-3000:]
    assert (run.dir / "metrics.jsonl").exists()


@pytest.mark.slow
def test_preflight_imports_no_torch_or_transformers():
    """validate of a chat-templated data recipe samples its data without the heavy stack."""
    probe = ("import sys, contextlib, io\nfrom launcher.__main__ import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n    main(['validate', 'recipe=tiny_grpo_chat'])\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'ray')))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
