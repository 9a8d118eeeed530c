"""The colocated start order on real Ray with the hf backends (tiny_grpo: two trainer ranks
and two engines on the same logical GPUs): every engine has gone to sleep at the plan's
level before the first trainer rank starts building, and the first weight sync brings the
sleeping engines' weights back so they generate. The order comes from Ray's own task
timeline (timeline_helpers.py), not from anything the launcher reports.
"""
import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow


def test_colocated_engines_sleep_before_the_trainers_build_and_wake_at_the_first_sync():
    from timeline_helpers import ended_before, task_spans

    from launcher.config.compose import compose
    from launcher.contract.messages import GenerationRequest, SamplingParams
    from launcher.driver.actors.cluster import ray_session
    from launcher.driver.actors.session import place_groups
    from launcher.plan import make_plan
    from launcher.weight_sync.push import sync_weights

    config = compose(["recipe=tiny_grpo", "run.name=start-order"]).config
    plan = make_plan(config)
    assert plan.placement.mode == "colocated" and plan.memory.sleep_level == 2  # full fine-tuning: derived 2
    with ray_session(config, plan.env):
        trainers, engines = place_groups(config, plan, embedded=True)
        asleep = ray.get([a.__ray_call__.remote(lambda e: (e.asleep_level, e.has_weights)) for a in engines.actors])
        sleeps, builds = task_spans(engines.actors, ".sleep"), task_spans(trainers.actors, ".__init__")
        sync_weights(trainers, engines, 0, with_base=True, wait=True)
        trainers.call("offload")
        engines.call("wake")
        request = GenerationRequest(prompts=[[1, 2, 3]], seed=0, sampling=SamplingParams(max_tokens=2))
        generated = engines.call("generate", request)
    assert asleep == [(2, False)] * len(engines)  # level 2 dropped the weights; the first sync re-sends them
    assert len(sleeps) == len(engines) and len(builds) == trainers.world, (sleeps, builds)
    assert ended_before(sleeps, builds), (sleeps, builds)
    assert all(len(g.tokens[0]) == 2 and g.policy_version == 0 for g in generated)
