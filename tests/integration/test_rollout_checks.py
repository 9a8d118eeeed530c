"""Rollouts that cannot go silently wrong (run.rollout_checks), through `python -m launcher`, tiny
model, hf engines on the CPU, faults injected from outside the product: a `sitecustomize` on
PYTHONPATH that patches the engine in the Ray worker processes only.

- A weight update that reaches the engine perturbed (noise on every parameter once it is
  loaded: what a sync under wrong names, dtypes or shards leaves) is caught by the canary at the
  next check, in the sync loop (the wake of the next step) and the async loop (after that
  update): exit 3, the phase named, and the last checkpoint is intact. In the sync loop the
  step it would have trained on has no row.
- An engine forced to sample one id trips the collapse bound (canary off) after
  stop_after_steps steps, before training on the last of them.
- A healthy run never trips anything and logs the canary's gap and the degeneration signs: checked
  on test_learning.py's 60-step colocated run.
"""
import json
import os
import re
import textwrap

import pytest

from launcher.driver.records.checkpoint import damage
from tests.integration.launch_helpers import Run

pytestmark = pytest.mark.slow

SITECUSTOMIZE = textwrap.dedent('''
    """Test fault injection: patches the hf engine inside Ray's worker processes only."""
    import os
    import sys

    if sys.argv and sys.argv[0].endswith("default_worker.py") and os.environ.get("FAULT"):
        import torch

        from launcher.workers.hf.engine import HfEngine

        fault, at = os.environ["FAULT"], int(os.environ.get("FAULT_AT", "0"))
        finish, generate = HfEngine._finish_weights, HfEngine.generate

        def perturbed_finish(self, version):
            finish(self, version)
            if fault == "perturb" and version == at:
                gen = torch.Generator().manual_seed(version)
                with torch.no_grad():
                    for p in self.model.parameters():
                        p.add_(torch.randn(p.shape, generator=gen) * 0.5)

        def one_id(self, request):
            out = generate(self, request)
            if fault == "one_id":
                out.tokens = [[7] * len(t) for t in out.tokens]
            return out

        HfEngine._finish_weights, HfEngine.generate = perturbed_finish, one_id
''')
LONG = ["algorithm.max_response_len=10", "inference.max_model_len=64", "checkpoint.every_steps=1", "run.steps=5"]


@pytest.fixture
def faults(tmp_path, monkeypatch):
    folder = tmp_path / "faults"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    return monkeypatch


def _steps(run) -> list[int]:
    return [row["step"] for row in run.metrics() if "reward" in row]


def _latest_checkpoint(run) -> tuple[int, str | None]:
    folder = sorted(run.dir.glob("checkpoints/step_*"))[-1]
    return json.loads((folder / "driver.json").read_text())["step"], damage(folder)


def test_a_perturbed_update_stops_the_sync_run_at_the_next_wake(tmp_path, faults):
    faults.setenv("FAULT", "perturb")
    faults.setenv("FAULT_AT", "2")  # the update after step 2's training
    run = Run(tmp_path, "sync_perturbed", LONG)
    code, out, err = run.finish(600)
    assert code == 3, err[-3000:]
    assert "rollout canary failed at the wake of step 3" in err and "run.rollout_checks.canary.relative_to_first" in err
    assert _steps(run) == [1, 2]  # step 3 was generated, never trained on
    assert _latest_checkpoint(run) == (2, None)


def test_a_perturbed_update_stops_the_async_run(tmp_path, faults):
    faults.setenv("FAULT", "perturb")
    faults.setenv("FAULT_AT", "2")
    run = Run(tmp_path, "async_perturbed", ["recipe=tiny_dapo_async", *LONG, "run.steps=8"])
    code, out, err = run.finish(600)
    assert code == 3, err[-3000:]
    assert "rollout canary failed at the update to version 2" in err and "canary.max_gap=0.5)" in err  # async: absolute
    assert max(_steps(run)) < 8
    step, why = _latest_checkpoint(run)
    assert why is None and step == max(_steps(run))


def test_an_engine_stuck_on_one_id_trips_the_collapse_bound(tmp_path, faults):
    faults.setenv("FAULT", "one_id")
    run = Run(tmp_path, "one_id", [*LONG, "run.rollout_checks.canary.prompts=0"])
    code, out, err = run.finish(600)
    assert code == 3, err[-3000:]
    # Responses that end early (an EOS before 8 tokens) do not count as collapsed: the share is under 1.
    assert re.search(r"run failed: step 2: .*collapse_frac [\d.]+ > run\.rollout_checks\.collapse_frac\.stop=0\.5 "
                     r"for 2 steps in a row", err), err[-3000:]
    assert "repeat_ngram_frac 0.8" in err and "the step's samples were not trained on" in err
    assert "warning: step 1: collapse_frac" in out
    assert _steps(run) == [1]  # step 2's samples were not trained on
    assert run.dir.joinpath("checkpoints").exists() and _latest_checkpoint(run) == (1, None)
