"""In-flight weight updates through `python -m launcher` (inference.update_mode: in_flight):
tiny_dapo_async with the engine slower than the trainer (100-token responses, one group of 2
a chunk: decoding is sequential and costs about the same per step for 2 sequences as for 8,
training is per token; with groups of 8 an unloaded CI run had the engine ahead and no update
land mid-chunk, with groups of 2 an unloaded step takes ~2x its training), so the trainer
finishes steps while the engine is mid-chunk, and dynamic sampling off,
so every group generated is trained on (a dropped group's spans would not reach samples.jsonl).
Each update then lands at a token boundary and the same sequences continue on the new
weights; logging.samples writes every trained sequence with its per-token versions
and behaviour log-probs, and the trainer's checkpoint of every step holds each version's
weights. A sequence spanning two versions is checked token by token: the tokens before the
update against the old version's full forward, every token against the replayed decode (each
step run by its own version's weights over the kept cache, tests/behaviour_logprobs.py).

The tiny model runs here without its two top-k choices (dense MLPs, a DSA index_topk above
the sequence lengths): the engine decodes a chunk's sequences as one batch and the replay one
at a time, and a near tie in a router or indexer score may then pick differently (one run had
2 of 26 tokens 0.016 apart), which is what algorithm.routing_replay / indexer_replay are for;
without them every token must agree to 1e-4."""
import json

import pytest
import torch

from tests.behaviour_logprobs import full_sequence_logprobs, replayed_logprobs

pytestmark = pytest.mark.slow

OVERRIDES = ["recipe=tiny_dapo_async", "inference.update_mode=in_flight", "logging.samples=true",
             "algorithm.prompts_per_step=4", "algorithm.mini_batch_prompts=4", "algorithm.samples_per_prompt=2",
             "algorithm.max_response_len=100", "inference.max_model_len=128", "inference.concurrency_per_engine=2",
             "algorithm.dynamic_sampling.enabled=false", "run.steps=5", "checkpoint.every_steps=1",
             "checkpoint.keep=10", "model.arch.mlp_layer_types=[dense,dense,dense,dense]", "model.arch.index_topk=128"]


def _version_models(run_dir, config) -> dict:
    """policy version N -> the engine's model with checkpoint step N's trainer weights; version
    0 is the trainer's random init, rebuilt from run.seed as the trainer built it."""
    from launcher.rl.tokenizer import make_tokenizer
    from launcher.workers.hf.model import VISION_PREFIX, build_model

    pad_id = make_tokenizer(config.model).pad_id
    models = {0: build_model(config.model, pad_id, seed=config.run.seed).eval()}
    for folder in sorted(run_dir.rglob("step_*")):
        model = build_model(config.model, pad_id, seed=0).eval()
        loaded = model.load_state_dict(torch.load(folder / "trainer" / "model.pt"), strict=False)
        assert not loaded.unexpected_keys and all(k.startswith(VISION_PREFIX) for k in loaded.missing_keys)
        models[int(folder.name.removeprefix("step_"))] = model
    return models


def test_a_sequence_spanning_two_versions_has_each_versions_logprobs(launch_run):
    from tests.shared_compose import compose_shipped

    run = launch_run("in_flight", OVERRIDES)
    code, out, err = run.finish()
    assert code == 0, err[-3000:]
    steps = [r for r in run.metrics() if "reward" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert max(r["version_span_max"] for r in steps) >= 1, [r["version_span_max"] for r in steps]
    assert all(r["staleness_max"] <= 2 for r in steps)  # judged on the oldest token
    config = compose_shipped(OVERRIDES).config
    models = _version_models(run.dir, config)
    rows = [json.loads(line) for line in (run.dir / "samples.jsonl").read_text().splitlines()]
    spanning = [r for r in rows if len(set(r["token_versions"])) > 1 and set(r["token_versions"]) <= models.keys()]
    assert spanning, "no trained sequence spans two versions"
    temperature = config.algorithm.temperature
    for row in spanning[:4]:
        prompt, tokens, versions = row["prompt_ids"], row["tokens"], row["token_versions"]
        assert versions == sorted(versions) and max(versions) <= row["trained_version"]
        swap = versions.index(versions[-1]) if len(set(versions)) == 2 else versions.index(max(versions))
        first = full_sequence_logprobs(models[versions[0]], prompt, tokens, temperature)
        assert row["logprobs"][:swap] == pytest.approx(first[:swap], abs=1e-4)
        replayed = replayed_logprobs(models, prompt, tokens, versions, temperature)
        assert row["logprobs"] == pytest.approx(replayed, abs=1e-4)
