"""The planner's MoE route bytes (plan.routes): tokens x MoE layers x top-k x 2 B per step,
how many steps' worth the loop holds, and the plan table that prints them."""
import pytest

from launcher.plan import make_plan
from launcher.plan.render import plan_tables
from tests.shared_compose import compose_shipped


def _plan(*overrides):
    return make_plan(compose_shipped(list(overrides)).config)


def test_glm5_3_flash_routes_per_token_and_step():
    routes = _plan("recipe=dapo_sync", "algorithm.routing_replay=true").routes
    assert routes.on and routes.bytes_per_token == 42 * 8 * 2  # 42 MoE layers (3 dense of 45) x top-8 x uint16
    assert routes.tokens_per_step == 128 * 12 * (2048 + 8192)  # every sequence at max prompt + max response
    assert routes.gib_per_step == pytest.approx(routes.tokens_per_step * 672 / 1024**3)
    assert routes.steps_held == 4  # the step + 3 DAPO regeneration rounds
    assert routes.object_store_gib == pytest.approx(2 * routes.driver_gib)


def test_async_holds_its_queue_and_off_costs_nothing():
    assert _plan("recipe=dapo_async", "algorithm.routing_agreement=true").routes.steps_held == 3
    off = _plan("recipe=dapo_sync").routes
    assert not off.on and off.gib_per_step == 0.0 and off.driver_gib == 0.0


def test_plan_prints_the_routes_only_when_on():
    assert "# MoE routes" in plan_tables(_plan("recipe=tiny_grpo", "algorithm.routing_replay=true"))
    assert "12 B (MoE layers x top-k x 2 B)" in plan_tables(_plan("recipe=tiny_grpo", "algorithm.routing_replay=true"))
    assert "# MoE routes" not in plan_tables(_plan("recipe=tiny_grpo"))


def test_indexer_pools_per_token_add_to_the_routes():
    both = _plan("recipe=dapo_sync", "algorithm.routing_replay=true", "algorithm.indexer_replay=true").routes
    assert both.indexer_bytes_per_token == 11 * (2048 // 16) * 2  # DSA layers 3, 7, ..., 43 x 128 pools x uint16
    assert both.bytes_per_token == 672 + 2816
    assert both.gib_per_step == pytest.approx(both.tokens_per_step * 3488 / 1024**3)
    alone = _plan("recipe=dapo_sync", "algorithm.indexer_agreement=true").routes
    assert alone.on and alone.route_bytes_per_token == 0 and alone.bytes_per_token == 2816


def test_a_shared_indexer_layer_carries_no_pools():
    """tiny: one DSA layer (3) of index_topk 16 / kpool 4; made shared-after-full, the second adds nothing."""
    assert _plan("recipe=tiny_grpo", "algorithm.indexer_replay=true").routes.indexer_bytes_per_token == 1 * 4 * 2
    shared = _plan("recipe=tiny_grpo", "algorithm.indexer_replay=true",
                   "model.arch.layer_types=[linear_attention,linear_attention,indexed_attention,indexed_attention]",
                   "model.arch.indexer_types=[full,full,full,shared]").routes
    assert shared.indexer_bytes_per_token == 8


def test_plan_prints_the_indexer_pools():
    text = plan_tables(_plan("recipe=tiny_grpo", "algorithm.indexer_replay=true"))
    assert "indexer pools 8 B (indexer layers x index_topk / index_kpool x 2 B)" in text and "routes 0 B" in text
