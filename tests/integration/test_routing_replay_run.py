"""Routing and DSA top-k replay in real runs (Ray, hf engine and hf or Megatron trainer
actors): the engines' uint16 route and indexer-pool arrays cross Ray's object store with the
samples, in the sync and the async loop, and every training row of metrics.jsonl says
routing_agreement and indexer_agreement 1.0 (the trainer used the engine's experts on every
token and MoE layer, and attended over the engine's k-pools on every token and indexer layer).

The tiny model's indexer keeps index_topk 16 tokens in pools of 4, which the tiny recipes'
~10-token sequences never exceed; INDEXER_SELECTS shrinks it to one pool of 2 tokens, so
every query from position 3 on chooses one of its complete pools."""
import pytest
from launch_helpers import SMALL

pytestmark = pytest.mark.slow

REPLAY = ["algorithm.routing_replay=true", "algorithm.indexer_replay=true"]
INDEXER_SELECTS = ["model.arch.index_topk=2", "model.arch.index_kpool=2"]


def _replayed_steps(run) -> list[dict]:
    code, out, err = run.finish()
    assert code == 0, err[-3000:]
    steps = [r for r in run.metrics() if "reward" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["routing_agreement"] == 1.0 and 0 <= r["routing_agreement_own"] <= 1 for r in steps)
    assert all(r["indexer_agreement"] == 1.0 for r in steps), [r["indexer_agreement"] for r in steps]
    assert all(0 <= r["indexer_agreement_own"] <= 1 for r in steps)
    return steps


@pytest.mark.parametrize("recipe", ["tiny_grpo", "tiny_dapo_async"])
def test_every_step_replays_the_engines_routes_and_indexer_pools(launch_run, recipe):
    run = launch_run(recipe, [f"recipe={recipe}", *SMALL, "run.steps=2", "checkpoint.every_steps=0",
                              "algorithm.max_response_len=4", *REPLAY, *INDEXER_SELECTS])
    steps = _replayed_steps(run)
    if recipe == "tiny_grpo":  # on-policy: the same weights, routes and pools give the engine's log-probs
        assert all(r["logprob_abs_diff_max"] < 1e-3 for r in steps)


def test_megatron_replays_the_engines_routes_and_pools_on_two_data_parallel_ranks(launch_run):
    """The tiny recipe's two CPU ranks, data parallel (model-parallel meshes with routing replay:
    test_megatron_model_parallel.py): each rank replays its shard's routes and pools on its packed stream."""
    run = launch_run("replay_megatron_dp2", ["trainer.backend=megatron", *SMALL, "run.steps=2", "checkpoint.every_steps=0",
                                             "algorithm.max_response_len=4", *REPLAY, *INDEXER_SELECTS])
    steps = _replayed_steps(run)
    assert all(r["logprob_abs_diff_max"] < 1e-3 for r in steps), [r["logprob_abs_diff_max"] for r in steps]
