"""The planner's MoE route bytes (plan.routes): tokens x MoE layers x top-k x 2 B per step,
how many steps' worth the loop holds, and the plan table that prints them."""
import pytest

from launcher.config.compose import compose
from launcher.plan import make_plan
from launcher.plan.render import plan_tables


def _plan(*overrides):
    return make_plan(compose(list(overrides)).config)


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
