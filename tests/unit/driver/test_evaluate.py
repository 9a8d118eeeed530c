"""Held-out evaluation without Ray: which steps, which problems, greedy decoding, the metrics
row, its place in metrics.jsonl (resume included), the plot, the rule and the command line.

The engines are real hf engines in this process behind EngineGroup's submit/result; the runs
through Ray are tests/integration/test_evaluate_run.py.
"""
import json

import pytest
import torch

from launcher.contract.spec import ActorSpec
from launcher.driver.loop import evaluate
from launcher.driver.loop.data import PromptStream
from launcher.rl.reward_fn import make_scorer
from launcher.rl.tokenizer import CharTokenizer, make_tokenizer
from launcher.weight_sync.pump import sync_in_process
from launcher.workers import engine_class, trainer_class
from tests.shared_compose import compose_shipped

TINY = ["recipe=tiny_grpo", "run.eval_problems=12", "run.eval_samples=3"]


class _LocalEngines:
    """EngineGroup's submit/result/len over engines in this process (round robin)."""

    def __init__(self, engines):
        self.engines, self._done = engines, {}

    def __len__(self) -> int:
        return len(self.engines)

    def submit(self, request, chunk_index: int):
        ref = object()
        self._done[ref] = self.engines[chunk_index % len(self.engines)].generate(request)
        return ref

    def result(self, ref):
        return self._done.pop(ref)


def _setup(overrides=(), engines=2):
    cfg = compose_shipped([*TINY, *overrides]).config
    tokenizer = make_tokenizer(cfg.model)
    trainer = trainer_class("hf")(ActorSpec.planned(cfg, 0, 1))
    group = [engine_class("hf")(ActorSpec.planned(cfg, i)) for i in range(engines)]
    sync_in_process(trainer, group, 0, with_base=True)
    return cfg, tokenizer, trainer, _LocalEngines(group)


def _no_time(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.endswith("_s")}


@pytest.mark.slow
def test_due_steps():
    cfg = compose_shipped(["recipe=tiny_grpo", "run.steps=5", "run.eval_every_steps=2", "run.eval_before_train=true"]).config
    ev = evaluate.Evaluator(cfg, evaluate.EvalSet([], [], "none"))
    assert [s for s in range(6) if ev.due(s)] == [0, 2, 4, 5]  # the last step too
    cfg = compose_shipped(["recipe=tiny_grpo", "run.eval_before_train=true"]).config
    assert evaluate.make_evaluator(cfg, CharTokenizer(cfg.model.arch.vocab_size)).due(0)
    cfg = compose_shipped(["recipe=tiny_grpo"]).config
    assert evaluate.make_evaluator(cfg, CharTokenizer(cfg.model.arch.vocab_size)) is None


def test_synthetic_held_out_problems_come_from_indices_training_never_reaches():
    cfg = compose_shipped(TINY).config
    tokenizer = CharTokenizer(cfg.model.arch.vocab_size)
    held_out = evaluate.eval_set(cfg, tokenizer)
    stream = PromptStream(cfg.data, cfg.run.seed, tokenizer)
    assert held_out.problems == stream.take(evaluate.HELD_OUT_BASE, 12)
    assert held_out.prompt_ids == [tokenizer.encode(p.prompt) for p in held_out.problems]
    assert "held-out" in held_out.source
    cfg = compose_shipped(["recipe=tiny_grpo"]).config
    assert len(evaluate.eval_set(cfg, tokenizer).problems) == evaluate.SYNTHETIC_PROBLEMS


@pytest.mark.slow
def test_val_path_is_read_by_the_training_loader(tmp_path):
    val = tmp_path / "val.jsonl"
    rows = [{"question": f"q{i} 1+{i}=?", "answer": f"#### {1 + i}"} for i in range(5)]
    rows.append({"question": "x" * 2000, "answer": "#### 1"})  # longer than max_prompt_len: dropped as in training
    val.write_text("".join(json.dumps(r) + "\n" for r in rows))
    over = ["recipe=gsm8k_grpo", f"data.val_path={val}", "run.eval_problems=4"]
    cfg = compose_shipped(over).config
    tokenizer = CharTokenizer(128)
    held_out = evaluate.eval_set(cfg, tokenizer, log=open("/dev/null", "w"))  # noqa: SIM115
    as_training = PromptStream(compose_shipped([*over, f"data.train_path={val}"]).config.data, 0, tokenizer).problems
    assert held_out.problems == list(as_training)[:4]
    assert held_out.source == f"data.val_path={val}"
    with pytest.raises(evaluate.EvalConfigError, match="data.val_path"):
        evaluate.eval_set(compose_shipped(["recipe=gsm8k_grpo"]).config, tokenizer)


def test_greedy_sampling_is_argmax():
    from launcher.workers.hf.compute import sample_next

    logits = torch.randn(6, 40)
    token, logp = sample_next(logits, 0.0, 1.0, torch.Generator().manual_seed(0))
    assert torch.equal(token, logits.argmax(-1))
    assert torch.allclose(logp, torch.log_softmax(logits, -1).max(-1).values)


@pytest.mark.slow
def test_eval_row_is_deterministic_and_matches_its_responses():
    cfg, tokenizer, _, engines = _setup()
    ev = evaluate.make_evaluator(cfg, tokenizer, force=True)
    scorer = make_scorer(cfg.data)
    first = ev.run(engines, 3, 0, scorer, tokenizer)
    assert _no_time(ev.run(engines, 3, 0, scorer, tokenizer)) == _no_time(first)
    # The same greedy answers from one engine, other chunk placement: routing does not matter.
    _, _, _, one_engine = _setup(engines=1)
    assert _no_time(ev.run(one_engine, 3, 0, scorer, tokenizer)) == _no_time(first)
    assert first["step"] == 3 and first["eval/n"] == 12 and first["eval/k"] == 3
    assert first["eval/policy_version"] == 0 and first["eval/reward_errors"] == 0
    for key in ("eval/greedy_acc", "eval/greedy_reward", "eval/mean_at_k_acc", "eval/mean_reward", "eval/pass_at_k"):
        assert 0.0 <= first[key] <= 1.0, key
    assert first["eval/pass_at_k"] >= first["eval/mean_at_k_acc"]
    # greedy_reward recomputed from a plain greedy generation of each prompt
    engine = engines.engines[0]
    from launcher.contract.messages import GenerationRequest, SamplingParams

    gen = engine.generate(GenerationRequest(ev.set.prompt_ids, 0, SamplingParams(cfg.algorithm.max_response_len, 0.0)))
    rewards = [scorer.score(tokenizer.decode(t), p).reward for t, p in zip(gen.tokens, ev.set.problems, strict=True)]
    assert first["eval/greedy_reward"] == pytest.approx(sum(rewards) / len(rewards))


@pytest.mark.slow
def test_greedy_only_and_training_weights_change_the_numbers():
    cfg, tokenizer, trainer, engines = _setup(["run.eval_samples=0"])
    ev = evaluate.make_evaluator(cfg, tokenizer, force=True)
    scorer = make_scorer(cfg.data)
    before = ev.run(engines, 0, 0, scorer, tokenizer)
    assert "eval/mean_at_k_acc" not in before and before["eval/k"] == 0
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    sync_in_process(trainer, engines.engines, 1, with_base=False)
    after = ev.run(engines, 1, 1, scorer, tokenizer)
    assert after["eval/policy_version"] == 1
    assert after["eval/greedy_reward"] != before["eval/greedy_reward"]
    with pytest.raises(RuntimeError, match="expected policy version 2"):
        ev.run(engines, 2, 2, scorer, tokenizer)


def _logger(run_dir, start_step):
    from launcher.driver.records.metrics import StepLogger

    cfg = compose_shipped(["recipe=tiny_grpo", "run.steps=4", "logging.backends=[jsonl]"]).config
    return StepLogger(run_dir, cfg.logging, cfg.run, start_step, {})


def _train_row(step):
    return {"step": step, "reward": 0.1 * step, "accuracy": 0.05 * step, "response_len": 2.0, "rollout_s": 0.0,
            "train_s": 0.0, "sync_s": 0.0, "tokens_per_s": 0.0}


def _eval_row(step):
    return {"step": step, "eval/greedy_acc": 0.1 * step, "eval/greedy_reward": 0.2, "eval/response_len": 2.0,
            "eval/mean_at_k_acc": 0.05 * step, "eval/mean_reward": 0.1, "eval/pass_at_k": 0.5,
            "eval/reward_errors": 0, "eval/n": 8, "eval/k": 4, "eval/policy_version": step, "eval/time_s": 0.1}


@pytest.mark.slow
def test_resume_drops_the_checkpoints_eval_row_and_the_plot_shows_held_out_series(tmp_path):
    from launcher.driver.records.plot import accuracy_panel

    log = _logger(tmp_path, 0)
    log.log_eval(_eval_row(0))
    for step in (1, 2, 3):
        log.log(_train_row(step))
        if step == 2:
            log.log_eval(_eval_row(2))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], "eval/n" in r) for r in rows] == [(0, True), (1, False), (2, False), (2, True), (3, False)]
    curves = {label: (steps, values) for label, steps, values in accuracy_panel(rows)}
    assert curves["held-out greedy accuracy"] == ([0, 2], [0.0, 0.2])
    assert curves["held-out mean@k accuracy"][0] == [0, 2]
    assert curves["accuracy"][0] == [1, 2, 3]
    assert log.close() == tmp_path / "curves.png" and (tmp_path / "curves.png").stat().st_size > 0
    _logger(tmp_path, 2)  # resumed from checkpoint 2: its eval is redone, step 3 too
    kept = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], "eval/n" in r) for r in kept] == [(0, True), (1, False), (2, False)]
    _logger(tmp_path, 0)  # a fresh start (no checkpoint) redoes step 0's eval
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_eval_console_line():
    from launcher.driver.records.metrics import eval_line

    line = eval_line({"steps": 4, **_eval_row(2)})
    assert line.startswith("eval    2/4 | greedy acc 0.200") and "mean@4 acc 0.100" in line and "n 8" in line


@pytest.mark.parametrize("overrides", [["run.eval_every_steps=5", "run.eval_before_train=true"],
                                       ["recipe=gsm8k_grpo", "run.eval_every_steps=5",
                                        "data.val_path=data/gsm8k_sample.jsonl"]])
def test_eval_settings_pass_eval001(point, overrides):
    p = point(*(["recipe=tiny_grpo"] if overrides[0].startswith("run.") else []), *overrides)
    assert p.of("EVAL001") == []


@pytest.mark.slow
def test_eval_command_line(cli, tmp_path):
    from launcher.cli.args import parse_args

    args = parse_args(["eval", "runs/x/checkpoints/step_000004", "data.val_path=v.jsonl", "--format", "json"])
    assert (args.command, args.overrides, args.format) == ("eval", ["runs/x/checkpoints/step_000004",
                                                                    "data.val_path=v.jsonl"], "json")
    done = cli("eval")
    assert done.returncode == 2 and "eval takes CHECKPOINT_DIR" in done.stderr
    done = cli("eval", str(tmp_path))
    assert done.returncode == 2 and "not a complete training checkpoint" in done.stderr


@pytest.mark.slow
def test_episodes_are_evaluated_by_playing_them_with_the_environment():
    """With data.environment the greedy response is a whole episode (turn, tool observation, turn),
    scored by the environment; recomputed here by playing each problem's episode by hand."""
    from launcher.contract.messages import GenerationRequest, SamplingParams
    from launcher.driver.loop.episodes import EpisodeRunner, observation_ids
    from launcher.envs.lookup import LookupEnv

    cfg = compose_shipped(["recipe=tiny_multiturn", "run.eval_problems=8", "run.eval_samples=2"]).config
    tokenizer = make_tokenizer(cfg.model)
    trainer = trainer_class("hf")(ActorSpec.planned(cfg, 0, 1))
    group = [engine_class("hf")(ActorSpec.planned(cfg, i)) for i in range(2)]
    sync_in_process(trainer, group, 0, with_base=True)
    runner = EpisodeRunner(cfg.data, cfg.algorithm.max_response_len, tokenizer, templated=False)  # synthetic prompts
    ev = evaluate.make_evaluator(cfg, tokenizer, force=True, episodes=runner)
    row = ev.run(_LocalEngines(group), 4, 0, scorer=None, tokenizer=tokenizer)  # the env scores, not the task
    assert _no_time(ev.run(_LocalEngines(group), 4, 0, None, tokenizer)) == _no_time(row)
    assert (row["eval/n"], row["eval/k"], row["eval/policy_version"], row["eval/reward_errors"]) == (8, 2, 0, 0)
    turn = SamplingParams(cfg.data.environment.max_turn_tokens, 0.0)
    rewards, model_tokens = [], []
    for problem, prompt in zip(ev.set.problems, ev.set.prompt_ids, strict=True):
        env = LookupEnv({}, {"reward_spec": {"ground_truth": problem.answer}})
        first = group[0].generate(GenerationRequest([prompt], 0, turn)).tokens[0]
        observation = observation_ids(tokenizer, env.step(tokenizer.decode(first))["observations"], templated=False)
        second = group[0].generate(GenerationRequest([prompt + first + observation], 0, turn)).tokens[0]
        rewards.append(env.step(tokenizer.decode(second))["reward"])
        model_tokens.append(len(first) + len(second))
    assert row["eval/greedy_reward"] == pytest.approx(sum(rewards) / len(rewards))
    assert row["eval/response_len"] == pytest.approx(sum(model_tokens) / len(model_tokens))
