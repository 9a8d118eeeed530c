"""Resume of a megatron run on a smaller mesh (issue 15): 4 steps on two data-parallel
ranks with a checkpoint every 2, then run.steps=6 on one rank continues from step 4,
saying what was resharded; checkpoint writes run in the background and their seconds
are in the metrics."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
BASE = ["recipe=tiny_grpo", "trainer.backend=megatron", "checkpoint.every_steps=2", "run.name=reshard",
        "algorithm.prompts_per_step=4", "algorithm.mini_batch_prompts=4", "algorithm.samples_per_prompt=8"]


def _launch(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", *BASE, f"run.output_dir={tmp_path}", *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_megatron_run_resumes_on_one_data_parallel_rank_fewer(tmp_path):
    first = _launch(tmp_path, "run.steps=4")
    assert first.returncode == 0, first.stderr[-3000:]
    second = _launch(tmp_path, "run.steps=6", "run.resume=auto", "cluster.gpus_per_node=1", "inference.engines=1")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resharded: checkpoint written on tp1 ep1 etp1 dp2 (2 ranks), loaded on tp1 ep1 etp1 dp1 (1 ranks)" \
        in second.stderr
    assert "resumed from" in second.stdout and "(step 4)" in second.stdout
    rows = [json.loads(line) for line in (tmp_path / "reshard" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "startup" not in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert {r["step"] for r in rows if "checkpoint_blocked_s" in r} == {2, 4, 6}
    assert {r["step"] for r in rows if "checkpoint_write_s" in r} == {3}  # step 2's background write, one step on
    done = sorted(p.name for p in (tmp_path / "reshard" / "checkpoints").iterdir())
    assert done[-1] == "step_000006" and not any(name.endswith(".partial") for name in done)
