"""Multi-turn episodes with a tool through `python -m launcher` (recipes/tiny_multiturn.yaml,
launcher/envs/lookup.py) on the embedded Ray: every trained sequence is model turn, tool
observation, model turn, with the observation's log-probs 0 (out of the loss); a resumed run
repeats the uninterrupted one's metrics; an env step that hangs or raises costs its episode and
the run goes on; the async loop runs and evaluates episodes too."""
import json

import pytest
from launch_helpers import SMALL

from launcher.envs.lookup import value_of
from launcher.rl.tokenizer import CharTokenizer

pytestmark = pytest.mark.slow
RECIPE = ["recipe=tiny_multiturn", *SMALL, "run.seed=5", "checkpoint.every_steps=2"]
ENV = ["data.environment.cls=launcher.envs.lookup:LookupEnv", "data.environment.max_turns=2",
       "data.environment.max_turn_tokens=2", "algorithm.max_response_len=8"]
TOK = CharTokenizer(64)


def _comparable(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.endswith("_s") and k not in ("tokens_per_s", "steps")} for m in metrics]


def test_episodes_train_model_tokens_and_a_resumed_run_repeats_the_uninterrupted_one(launch_run):
    whole = launch_run("whole", [*RECIPE, "run.steps=4", "logging.samples=true"])
    code, _, err = whole.finish()
    assert code == 0, err[-3000:]
    rows = whole.metrics()
    assert [r["turns_mean"] for r in rows] == [2.0] * 4 and all(r["tool_calls"] == 32 for r in rows)
    assert all(r["observation_tokens"] == 32 * 4 for r in rows)  # "\n" + two digits + "\n" per episode
    for sample in map(json.loads, (whole.dir / "samples.jsonl").read_text().splitlines()):
        key = TOK.decode(sample["prompt_ids"])[1:3]
        observed = [i for i, lp in enumerate(sample["logprobs"]) if lp == 0.0]  # the model's own are < 0
        start = observed[0]
        assert 1 <= start <= 2 and observed == list(range(start, start + 4))  # after a turn of 1 (EOS) or 2 tokens
        assert sample["tokens"][start:start + 4] == TOK.encode(f"\n{value_of(key)}\n")
    first = launch_run("cut", [*RECIPE, "run.steps=2"])
    assert first.finish()[0] == 0
    resumed = launch_run("cut", [*RECIPE, "run.steps=4", "run.resume=auto", "logging.samples=true"])
    code, out, err = resumed.finish()
    assert code == 0 and "resumed from" in out, err[-3000:]
    assert _comparable(resumed.metrics()) == _comparable(rows)


FLAKY_ENV = '''
import time
from launcher.envs.lookup import LookupEnv


class FlakyEnv(LookupEnv):
    """Key digits summing to a multiple of 3 hang, to 1 mod 3 raise, the rest work."""

    def step(self, action):
        kind = sum(int(d) for d in self.key) % 3
        if kind == 0:
            time.sleep(60)
        if kind == 1:
            raise ConnectionError("lookup service unreachable")
        return super().step(action)
'''


def test_a_hanging_or_crashing_tool_costs_its_episode_and_the_run_goes_on(launch_run, tmp_path, monkeypatch):
    (tmp_path / "flaky_env.py").write_text(FLAKY_ENV)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    run = launch_run("flaky", [*RECIPE, "run.steps=2", "data.environment.cls=flaky_env:FlakyEnv",
                               "data.environment.step_timeout_s=1"])
    code, _, err = run.finish()
    assert code == 0, err[-3000:]
    rows = run.metrics()
    assert len(rows) == 2 and all(r["tool_error_frac"] + r["tool_timeout_frac"] < 1 for r in rows)  # some worked
    assert any(r["tool_error_frac"] > 0 for r in rows) and any(r["tool_timeout_frac"] > 0 for r in rows)
    assert "timed out after 1 s (data.environment.step_timeout_s)" in err and "ConnectionError: lookup service unreachable" in err


def test_the_async_loop_runs_and_evaluates_episodes(launch_run):
    run = launch_run("async", ["recipe=tiny_dapo_async", *SMALL, "run.steps=3", *ENV, "run.eval_every_steps=2",
                               "run.eval_problems=6", "run.eval_samples=2"])
    code, _, err = run.finish()
    assert code == 0, err[-3000:]
    rows = run.metrics()
    assert [r["turns_mean"] for r in rows if "turns_mean" in r] == [2.0] * 3
    evals = [r for r in rows if "eval/n" in r]
    # after steps 2 and 3 (the last), each on the version its step published: all turns on one version
    assert [(r["step"], r["eval/policy_version"], r["eval/n"], r["eval/k"]) for r in evals] == [(2, 2, 6, 2), (3, 3, 6, 2)]
    assert all(2 <= r["eval/response_len"] <= 4 and r["eval/reward_errors"] == 0 for r in evals)  # two turns
