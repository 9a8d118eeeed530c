"""The Megatron trainer's model-parallel meshes train on CPU (gloo) exactly as its data-parallel
run does: tp2 with sequence parallelism, ep2 and tp2 + ep2 in full fine-tuning, tp2 + etp2
with LoRA on the routed experts (whose ETP-duplicated adapter halves get partial grads).

All runs start from one checkpoint folder (random init is drawn per shard, so it differs by
mesh; the folder does not) with mesh-independent LoRA init, and replay the engines' routes. The
gradient norm over the mesh is in every row (grad_norm) and clips every step that trains
(grad_clip 0.1, below all of them), so a norm counted wrong shows in the rows and in the
updates after it. Five GRPO steps on two ranks; every metric but the timings must agree."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import SMALL

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
COMMON = ["recipe=tiny_grpo", "trainer.backend=megatron", "run.steps=5", "checkpoint.every_steps=0", *SMALL,
          "trainer.optimizer.lr=0.02", "trainer.optimizer.grad_clip=0.1", "algorithm.routing_replay=true"]
LORA = ["trainer.lora.rank=4", "trainer.lora.alpha=8",
        "trainer.lora.targets=[linear_proj,q_proj,f_a_proj,linear_fc1,linear_fc2]"]
SP = "trainer.mesh.sequence_parallel=true"
MESHES = {
    "tp2_sp": ([], ["trainer.mesh.tp=2", SP], {"tp": 2, "ep": 1, "etp": 1, "dp": 1}),
    "ep2": ([], ["trainer.mesh.ep=2"], {"tp": 1, "ep": 2, "etp": 1, "dp": 2}),
    "tp2_ep2": ([], ["trainer.mesh.tp=2", "trainer.mesh.ep=2", SP], {"tp": 2, "ep": 2, "etp": 1, "dp": 1}),
    "tp2_etp2_lora": (LORA, ["trainer.mesh.tp=2", "trainer.mesh.etp=2", SP], {"tp": 2, "ep": 1, "etp": 2, "dp": 1}),
}


def _train(out: Path, name: str, checkpoint: Path, overrides: list[str]) -> tuple[list[dict], dict]:
    """(training rows, planned mesh) of a finished run."""
    done = subprocess.run([sys.executable, "-m", "launcher", *COMMON, f"model.hf_path={checkpoint}",
                           f"run.output_dir={out}", f"run.name={name}", *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "startup" not in r], json.loads((out / name / "plan.json").read_text())["mesh"]


@pytest.fixture(scope="module")
def data_parallel_rows(tmp_path_factory, tiny_glm_checkpoint) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("dp")
    return {lora: _train(out, f"dp2_{lora}", tiny_glm_checkpoint, list(LORA) if lora == "lora" else [])[0]
            for lora in ("full", "lora")}


def _disagreements(want: list[dict], got: list[dict]) -> list[str]:
    """Every metric but timings, step by step: counts equal, floats within 1e-3 relative or
    1e-4 absolute (gloo's reduction order; measured at most 1.2e-4 on the grad norm)."""
    bad = []
    for a, b in zip(want, got, strict=True):
        for key, value in a.items():
            if key.endswith("_s") or not isinstance(value, int | float):
                continue
            if key not in b or not math.isclose(value, b[key], rel_tol=1e-3, abs_tol=1e-4):
                bad.append(f"step {a['step']} {key}: dp {value} vs {b.get(key)}")
    return bad


@pytest.mark.parametrize("mesh", list(MESHES))
def test_a_model_parallel_mesh_trains_as_the_data_parallel_run(mesh, data_parallel_rows, tiny_glm_checkpoint,
                                                               tmp_path):
    lora, overrides, planned = MESHES[mesh]
    rows, plan_mesh = _train(tmp_path, mesh, tiny_glm_checkpoint, [*lora, *overrides])
    assert {k: plan_mesh[k] for k in planned} == planned
    want = data_parallel_rows["lora" if lora else "full"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert max(r["grad_norm"] for r in rows) > 0.1, "no step clipped: the test would not see a wrong norm"
    assert rows[-1]["entropy"] != rows[0]["entropy"], "the run did not train"
    assert all(r["routing_agreement"] == 1.0 for r in rows), [r["routing_agreement"] for r in rows]
    assert _disagreements(want, rows) == []
