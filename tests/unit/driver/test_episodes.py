"""Multi-turn episodes (driver/loop/episodes.py) without Ray: each turn's request, the tokens,
log-probs, versions and loss masks of an episode exactly, the budget, an env step that hangs or
raises, observation tokens under a chat template and the start-up check of its tool role; and the
trainer's batch mask (workers/batch.py)."""
import json
import shutil
import time
from types import SimpleNamespace

import pytest
import torch

from launcher.config.schema.env import EnvConfig
from launcher.contract.messages import Generation, SamplingParams, TrainShard
from launcher.driver.loop.episodes import EpisodeRunner, observation_ids, tool_template_problem
from launcher.envs.lookup import LookupEnv, value_of
from launcher.rl.env_class import EnvError
from launcher.rl.tasks import Problem
from launcher.rl.tokenizer import CharTokenizer, TemplateTokenizer
from launcher.workers.batch import keep_model_tokens, micro_batches

TOK = CharTokenizer(64)
SAMPLING = SamplingParams(max_tokens=8, temperature=1.0)


def _runner(cls="launcher.envs.lookup:LookupEnv", budget=8, **env) -> EpisodeRunner:
    cfg = EnvConfig(cls=cls, max_turns=2, max_turn_tokens=2, step_timeout_s=1.0, **env)
    return EpisodeRunner(SimpleNamespace(environment=cfg), budget, TOK, templated=False)


def _turn(texts: list[str], version: int) -> Generation:
    tokens = [TOK.encode(t) for t in texts]
    return Generation(tokens=tokens, logprobs=[[-0.5] * len(t) for t in tokens], finished=[False] * len(tokens),
                      policy_version=version, token_versions=[[version] * len(t) for t in tokens])


def _start(runner, keys=("57", "90")):
    problems = [Problem(prompt=f"c{k}=", answer=k) for k in keys]
    return runner.start(problems, [TOK.encode(p.prompt) for p in problems], list(range(len(keys))), 1)


def test_an_episode_is_model_turn_observation_model_turn_with_the_observation_out_of_the_loss():
    episodes = _start(_runner())
    first = episodes.request(SAMPLING, seed=7, in_flight=False)
    assert first.prompts == [TOK.encode("c57="), TOK.encode("c90=")] and first.sampling.max_tokens == 2
    assert not episodes.take_turn(_turn(["??", "ab"], version=3))
    second = episodes.request(SAMPLING, seed=7, in_flight=False)
    observation = TOK.encode(f"\n{value_of('57')}\n")
    assert second.prompts[0] == TOK.encode("c57=") + TOK.encode("??") + observation
    assert second.seed != first.seed and second.sampling.max_tokens == 2
    assert episodes.take_turn(_turn([value_of("57"), "00"], version=4))
    gen, rewards, correct, masks, stats = episodes.generation()
    assert gen.tokens[0] == TOK.encode("??") + observation + TOK.encode(value_of("57"))
    assert masks[0] == [True, True] + [False] * len(observation) + [True, True]
    assert gen.logprobs[0] == [-0.5, -0.5] + [0.0] * len(observation) + [-0.5, -0.5]
    assert gen.token_versions[0] == [3, 3] + [3] * len(observation) + [4, 4]
    assert (rewards, correct) == ([1.0, 0.0], [True, False])
    assert stats[0] == {"turns": 2, "tool_calls": 1, "tool_errors": 0, "tool_timeouts": 0, "step_errors": 0,
                        "step_timeouts": 0, "model_tokens": 4, "observation_tokens": len(observation)}


def test_an_observation_past_the_budget_ends_the_episode_as_truncated():
    episodes = _start(_runner(budget=5), keys=("57",))
    assert episodes.take_turn(_turn(["??"], version=0))  # 2 + 4 observation tokens > 5
    gen, rewards, _, masks, _ = episodes.generation()
    assert gen.tokens == [TOK.encode("??")] and masks == [[True, True]] and gen.finished == [False]
    assert rewards == [0.0]


class HangingEnv(LookupEnv):
    def step(self, action):
        time.sleep(30)


class CrashingEnv(LookupEnv):
    def step(self, action):
        raise RuntimeError("the tool's server is down")


def test_a_hanging_or_crashing_step_ends_its_episode_with_reward_0_and_is_counted(capsys):
    for cls, counter in ((HangingEnv, "step_timeouts"), (CrashingEnv, "step_errors")):
        runner = _runner(cls=f"{__name__}:{cls.__name__}")
        episodes = _start(runner)
        started = time.monotonic()
        assert episodes.take_turn(_turn(["??", "??"], version=0))
        assert time.monotonic() - started < 5  # within step_timeout_s (1 s), not the 30 s the step sleeps
        _, rewards, correct, _, stats = episodes.generation()
        assert rewards == [0.0, 0.0] and correct == [False, False] and [s[counter] for s in stats] == [1, 1]
    err = capsys.readouterr().err
    assert "timed out after 1 s (data.environment.step_timeout_s)" in err and "RuntimeError: the tool's server is down" in err


def test_observations_follow_the_chat_template_after_a_model_turn():
    tok = TemplateTokenizer("data/tiny_tokenizer")
    ids = observation_ids(tok, [{"role": "tool", "content": "80"}], templated=True)
    assert tok.decode(ids) == tok.decode(tok.encode("<|observation|>\n80<|assistant|>\n"))
    assert observation_ids(TOK, [{"role": "tool", "content": "80"}], templated=False) == TOK.encode("\n80\n")
    # raw prompts (data.chat_template=none, a synthetic task): raw observations, template or not
    assert tok.decode(observation_ids(tok, [{"role": "tool", "content": "80"}], templated=False)) == \
        tok.decode(tok.encode("\n80\n"))


USER_ASSISTANT_ONLY = ("{% for m in messages %}{% if m.role == 'user' %}<|user|>\n{{ m.content }}"
                       "{% elif m.role == 'assistant' %}<|assistant|>\n{{ m.content }}{% endif %}{% endfor %}"
                       "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
STRICT_ROLES = ("{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
                "{{ raise_exception('Conversation roles must be user or assistant') }}{% endif %}"
                "<|{{ m.role }}|>\n{{ m.content }}{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def _with_template(tmp_path, template: str) -> TemplateTokenizer:
    folder = tmp_path / f"template_{abs(hash(template))}"
    if folder.exists():
        return TemplateTokenizer(str(folder))
    shutil.copytree("data/tiny_tokenizer", folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    return TemplateTokenizer(str(folder))


def test_a_chat_template_without_a_tool_role_is_refused_before_ray(tmp_path):
    assert tool_template_problem(TemplateTokenizer("data/tiny_tokenizer"), True) is None  # GLM's <|observation|>
    no_tool_role = _with_template(tmp_path, USER_ASSISTANT_ONLY)
    assert tool_template_problem(no_tool_role, False) is None  # raw prompts: plain observation lines
    assert tool_template_problem(no_tool_role, True) == "the template drops a tool message's content"
    assert "Conversation roles must be user or assistant" in tool_template_problem(_with_template(tmp_path, STRICT_ROLES),
                                                                                   True)
    cfg = EnvConfig(cls="launcher.envs.lookup:LookupEnv", max_turns=2, max_turn_tokens=2, step_timeout_s=1.0)
    with pytest.raises(EnvError, match="data.environment.cls='launcher.envs.lookup:LookupEnv': the tokenizer's chat "
                                       "template cannot carry tool observations: the template drops"):
        EpisodeRunner(SimpleNamespace(environment=cfg), 8, _with_template(tmp_path, USER_ASSISTANT_ONLY), templated=True)


def test_the_trainer_batch_keeps_model_tokens_only():
    seqs, prompt_lens = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 8]], [2, 2]
    shard = TrainShard(sequences=seqs, prompt_lens=prompt_lens, advantages=[1.0, 1.0], tokens_in_mini_batch=4,
                       seqs_in_mini_batch=2, loss_masks=[[True, False, False, True], [True, True]])
    expected = [[False, True, False, False, True], [False, True, True, False, False]]
    (batch,) = micro_batches(seqs, prompt_lens, pad_id=0, max_tokens=100)
    keep_model_tokens(batch, shard)
    assert batch.mask_BT.tolist() == expected
    unmasked = TrainShard(sequences=seqs, prompt_lens=prompt_lens, advantages=[1.0, 1.0], tokens_in_mini_batch=6,
                          seqs_in_mini_batch=2)
    (plain,) = micro_batches(seqs, prompt_lens, pad_id=0, max_tokens=100)
    before = plain.mask_BT.clone()
    keep_model_tokens(plain, unmasked)
    assert torch.equal(plain.mask_BT, before)


class BytesTokenizer:
    """Any text round-trips (the character tokenizer has no backticks or braces)."""

    has_chat_template = False

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode()


def test_the_code_tool_runs_in_the_sandbox_between_turns_and_the_answer_is_scored():
    cfg = EnvConfig(cls="launcher.envs.code_math:CodeMathEnv", max_turns=3, step_timeout_s=30.0,
                    config={"timeout_s": 10})
    tok = BytesTokenizer()
    runner = EpisodeRunner(SimpleNamespace(environment=cfg), 400, tok, templated=False)
    problem = Problem(prompt="What is 6 times 7?", answer="#### 42")
    episodes = runner.start([problem], [tok.encode(problem.prompt)], [0], 1)

    def turn(text: str) -> Generation:
        ids = tok.encode(text)
        return Generation(tokens=[ids], logprobs=[[-0.1] * len(ids)], finished=[True], policy_version=0,
                          token_versions=[[0] * len(ids)])

    assert not episodes.take_turn(turn("Let me compute.\n```python\nprint(6 * 7)\n```"))
    history = tok.decode(episodes.request(SAMPLING, seed=1, in_flight=False).prompts[0])
    assert history.endswith("<tool_response>\n42\n</tool_response>\n")  # the sandbox's output, as the next prompt
    assert episodes.take_turn(turn("The answer is \\boxed{42}."))
    _, rewards, correct, masks, stats = episodes.generation()
    assert (rewards, correct) == ([1.0], [True]) and stats[0]["tool_calls"] == 1 and stats[0]["turns"] == 2
    assert masks[0].count(False) == stats[0]["observation_tokens"] > 0
