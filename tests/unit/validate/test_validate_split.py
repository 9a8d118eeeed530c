"""Rules run once for many candidates only when, run on the base, they read no varied path."""
import pytest

from launcher.errors import Finding
from launcher.plan import make_plan
from launcher.validate.registry import Rule
from launcher.validate.split import split_rules
from tests.shared_compose import compose_shipped

VARIED = ("cfg.trainer.mesh", "cfg.inference.tp", "plan.mesh")
FOUND = Finding("T", "warning", "k", "m", "w", "f")


def _rule(rule_id: str, reads) -> Rule:
    def fn(cfg, plan):
        if reads(cfg, plan) is not None:
            yield FOUND

    return Rule(rule_id, fn)


@pytest.fixture(scope="module")
def point():
    cfg = compose_shipped(["recipe=dapo_sync"]).config
    return cfg, make_plan(cfg)


def test_rules_are_fixed_exactly_when_they_read_no_varied_path(point):
    rules = [
        _rule("algorithm", lambda c, p: c.algorithm.clip_low),
        _rule("sibling_of_varied", lambda c, p: (c.trainer.lora.rank, c.inference.max_num_seqs)),
        _rule("model_part", lambda c, p: p.arch.has_moe),
        _rule("mesh", lambda c, p: c.trainer.mesh.tp),
        _rule("through_a_helper", lambda c, p: (lambda inf: inf.tp)(c.inference)),
        _rule("plan_part", lambda c, p: p.mesh.dp),
        _rule("plan_property", lambda c, p: p.mesh_ok),  # a property could read anything
        _rule("whole_section", lambda c, p: f"{c.trainer}"),
        _rule("equality", lambda c, p: c.inference == c.inference),
    ]
    split = split_rules(*point, VARIED, rules)
    assert split.fixed_ids == ("algorithm", "sibling_of_varied", "model_part")
    assert split.fixed == (FOUND,) * 3
    assert [r.id for r in split.per_candidate] == ["mesh", "through_a_helper", "plan_part", "plan_property",
                                                   "whole_section", "equality"]


def test_a_fixed_rule_is_not_run_again_per_candidate(point):
    calls = []
    split = split_rules(*point, VARIED, [_rule("algorithm", lambda c, p: calls.append(c.algorithm.clip_low) or 1)])
    for _ in range(3):
        assert split.check(*point) == [FOUND]
    assert len(calls) == 1


def test_a_rule_cannot_swallow_the_varied_read(point):
    def swallows(cfg, plan):
        try:
            tp = cfg.trainer.mesh.tp
        except Exception:  # noqa: BLE001 - what a careless rule might do
            tp = 1
        if tp > 1:
            yield FOUND

    split = split_rules(*point, VARIED, [Rule("swallows", swallows)])
    assert split.fixed_ids == ()
