"""In-flight weight updates through `python -m launcher` (inference.update_mode: in_flight):
tiny_dapo_async with the engine slower than the trainer (100-token responses, one group of 2
a chunk: decoding is sequential and costs about the same per step for 2 sequences as for 8,
training is per token; with groups of 8 an unloaded CI run had the engine ahead and no update
land mid-chunk, with groups of 2 an unloaded step takes ~2x its training), so the trainer
finishes steps while the engine is mid-chunk, and dynamic sampling off,
so every group generated is trained on (a dropped group's spans would not reach samples.jsonl),
and DAPO's overlong penalty from 10 tokens on: the copy task's reward is ~0 at this length,
and without rewards that differ within a group most steps had a zero gradient, so the
versions a sequence spanned had the same weights and the check below told nothing apart.
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

from tests.behaviour_logprobs import check_spanning_sequences, version_models

pytestmark = pytest.mark.slow

OVERRIDES = ["recipe=tiny_dapo_async", "inference.update_mode=in_flight", "logging.samples=true",
             "algorithm.prompts_per_step=4", "algorithm.mini_batch_prompts=4", "algorithm.samples_per_prompt=2",
             "algorithm.max_response_len=100", "inference.max_model_len=128", "inference.concurrency_per_engine=2",
             "algorithm.dynamic_sampling.enabled=false", "run.steps=5", "checkpoint.every_steps=1",
             "checkpoint.keep=10", "model.arch.mlp_layer_types=[dense,dense,dense,dense]", "model.arch.index_topk=128",
             "algorithm.overlong.buffer_len=90"]


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
    rows = [json.loads(line) for line in (run.dir / "samples.jsonl").read_text().splitlines()]
    check_spanning_sequences(rows, version_models(run.dir, config), config.algorithm.temperature, tol=1e-4)
