"""The default recipe (`python -m launcher`, tiny_grpo_chat) runs the path a real run takes:
a verl-format parquet read through HF datasets, prompts through the shipped BPE tokenizer's
GLM chat template, responses that end at an EOS id, held-out evaluation on the val split.
Two short steps here; benchmarks/laptop_demo.py times the whole demo against its target."""
import pytest
from launch_helpers import SMALL

pytestmark = pytest.mark.slow


def test_default_recipe_trains_and_evaluates_from_the_shipped_files(launch_run):
    run = launch_run("demo", ["recipe=tiny_grpo_chat", *SMALL, "run.steps=2", "run.eval_every_steps=2",
                              "run.eval_problems=8", "run.eval_samples=2", "checkpoint.every_steps=0"])
    code, out, err = run.finish()
    assert code == 0, err[-3000:]
    assert "kept 1,500 of 1,500 prompts" in out + err and "(chat template counted)" in out + err
    rows = run.metrics()
    steps, evals = [r for r in rows if "eval/n" not in r], [r for r in rows if "eval/n" in r]
    assert [r["step"] for r in steps] == [1, 2] and [r["step"] for r in evals] == [2]
    assert evals[0]["eval/n"] == 8 and evals[0]["eval/k"] == 2
    # A response is at most max_response_len tokens; one that stopped early ended at an eos id.
    assert all(0 < r["response_len"] <= 3 and 0 <= r["truncated_frac"] <= 1 for r in steps)
    # The trainer-vs-rollout metrics of every step (same weights, same numerics: a tiny gap, nothing masked).
    assert all(0 <= r["logprob_abs_diff_mean"] <= r["logprob_abs_diff_max"] < 1e-3 and r["is_masked_frac"] == 0
               and "rollout_kl" in r for r in steps)
    (startup,) = run.startup_rows()
    assert startup["step"] == 0 and startup["startup_estimate_s"] > 0
    assert {"engine 0", "trainer rank 0", "driver"} <= set(startup["startup"])
    assert set(startup["startup"]["engine 0"]) == {"building (empty: weights come by sync)"}  # no checkpoint read, no init
    assert "first sync" in startup["startup"]["driver"] and startup["startup_s"] > 0
    assert "start-up engines: engine 0" in out and "start-up trainers: trainer rank 0" in out
    assert run.leftover_daemons() == []
