"""Partial rollouts through `python -m launcher` (algorithm.partial_rollout.max_tokens_per_step),
sync loop, tiny model, hf engine: 8-token responses, a budget of 4 tokens a step.

The random-init model almost never ends early, so every group takes two steps; DAPO's dynamic
sampling drops the groups without reward variance (the reward below: the first character's
parity, so about half) and refills them from new prompts within the step, which staggers the
groups: a refill started in step s is carried into step s + 1 and finishes there on the weights
step s trained. logging.samples writes every trained sequence with its per-token versions and
behaviour log-probs; a checkpoint every step holds each version's weights. Each carried
sequence's tokens are checked against the version that produced them: the engine re-prefills
the prompt and the tokens so far with the new weights, so a token of version v has version v's
log-prob over the whole sequence before it (tests/behaviour_logprobs.py full_sequence_logprobs).

Then a run resumed from a checkpoint that holds a carried group repeats the uninterrupted
run's later steps exactly. The tiny model runs without its top-k choices (dense MLPs, index_topk
above the lengths), as in test_in_flight_updates.py: batched and one-sequence forwards agree to 1e-4.
Measured (seed 0): 5 spanning sequences, each token within 5e-7 of its own version's log-prob
and 1.6e-2 to 5.5e-2 away from the older version's on the newer tokens. Two launches: 24 s + 40 s
of start-up with the machine loaded, 2 min in all (the steps themselves take under a second).
"""
import json
import os
import textwrap

import pytest
import torch

from tests.behaviour_logprobs import full_sequence_logprobs

pytestmark = pytest.mark.slow

REWARDS = textwrap.dedent('''
    def first_char_parity(data_source, solution_str, ground_truth, extra_info):
        return {"score": float(bool(solution_str) and ord(solution_str[0]) % 2 == 1), "acc": False}
''')
OVERRIDES = ["algorithm.name=dapo", "algorithm.dynamic_sampling.enabled=true",
             "algorithm.dynamic_sampling.max_regenerations=1", "algorithm.prompts_per_step=4",
             "algorithm.mini_batch_prompts=4", "algorithm.samples_per_prompt=2", "algorithm.max_response_len=8",
             "algorithm.partial_rollout.max_tokens_per_step=4", "logging.samples=true",
             "checkpoint.every_steps=1", "checkpoint.keep=10", "data.reward_fn=partial_rewards_q44:first_char_parity",
             "model.arch.mlp_layer_types=[dense,dense,dense,dense]", "model.arch.index_topk=128"]
STEPS = 4


@pytest.fixture
def rewards_module(tmp_path, monkeypatch):
    (tmp_path / "partial_rewards_q44.py").write_text(REWARDS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))


def _version_models(run_dir, config) -> dict:
    """policy version -> the engine's model with the weights of a checkpoint at that version
    (driver.json: a step that trained nothing keeps its version and its weights)."""
    from launcher.rl.tokenizer import make_tokenizer
    from launcher.workers.hf.model import VISION_PREFIX, build_model

    pad_id, models = make_tokenizer(config.model).pad_id, {}
    for folder in sorted(run_dir.glob("checkpoints/step_*")):
        version = json.loads((folder / "driver.json").read_text())["policy_version"]
        model = build_model(config.model, pad_id, seed=0).eval()
        loaded = model.load_state_dict(torch.load(folder / "trainer" / "model.pt"), strict=False)
        assert not loaded.unexpected_keys and all(k.startswith(VISION_PREFIX) for k in loaded.missing_keys)
        models.setdefault(version, model)
    return models


def _samples(run) -> list[dict]:
    return [json.loads(line) for line in (run.dir / "samples.jsonl").read_text().splitlines()]


def _comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in rows]


def _assert_each_token_has_its_versions_logprob(row: dict, models: dict, temperature: float) -> None:
    prompt, tokens, versions = row["prompt_ids"], row["tokens"], row["token_versions"]
    assert versions == sorted(versions) and max(versions) <= row["trained_version"]
    for version in sorted(set(versions)):
        own = [i for i, v in enumerate(versions) if v == version]
        expected = full_sequence_logprobs(models[version], prompt, tokens, temperature)
        assert [row["logprobs"][i] for i in own] == pytest.approx([expected[i] for i in own], abs=1e-4)
    first, last = versions[0], versions[-1]  # the versions' weights differ enough to tell them apart
    older = full_sequence_logprobs(models[first], prompt, tokens, temperature)
    assert max(abs(row["logprobs"][i] - older[i]) for i, v in enumerate(versions) if v == last) > 1e-3


def test_carried_sequences_finish_on_the_next_version_and_survive_a_resume(launch_run, rewards_module):
    from tests.shared_compose import compose_shipped

    whole = launch_run("whole", OVERRIDES + [f"run.steps={STEPS}"])
    code, out, err = whole.finish()
    assert code == 0, err[-3000:]
    rows = [r for r in whole.metrics() if "reward" in r]
    assert rows[0]["partial_carried_out"] == 8 and rows[0]["groups_kept"] == 0  # 4 groups of 2, none done
    assert all(r["partial_carried_in"] == prev["partial_carried_out"] for prev, r in zip(rows, rows[1:], strict=False))
    assert all(r["staleness_max"] <= 1 for r in rows)
    samples = _samples(whole)
    spanning = [s for s in samples if len(set(s["token_versions"])) > 1]
    assert spanning, [s["token_versions"] for s in samples]
    config = compose_shipped(["recipe=tiny_grpo", *OVERRIDES]).config
    models = _version_models(whole.dir, config)
    for row in spanning:
        _assert_each_token_has_its_versions_logprob(row, models, config.algorithm.temperature)

    carrying = min(s["step"] for s in spanning) - 1  # its checkpoint holds the first spanning group part-way
    assert rows[carrying - 1]["partial_carried_out"] > 0
    resumed = launch_run("resumed", OVERRIDES + [f"run.steps={STEPS}",
                                                 f"run.resume={whole.dir / 'checkpoints' / f'step_{carrying:06d}'}"])
    code, out, err = resumed.finish()
    assert code == 0, err[-3000:]
    assert _comparable(resumed.metrics()) == _comparable(rows[carrying:])
    assert _samples(resumed) == [s for s in samples if s["step"] > carrying]
