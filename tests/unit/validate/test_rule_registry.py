"""The rules live in the one registry form, and a rule's id is written once: at registration."""
import pytest

from launcher.plan import make_plan
from launcher.registry import Registry
from launcher.validate import RULES
from launcher.validate.registry import Draft, rule
from launcher.validate.rules.sequence import fits_model_len
from tests.shared_compose import compose_shipped


def test_a_duplicate_rule_id_raises_and_registers_nothing():
    before = RULES.get("SEQ001")
    with pytest.raises(ValueError, match="'SEQ001' is registered twice"):
        rule("SEQ001")(lambda cfg, plan: iter(()))
    assert RULES.get("SEQ001") is before and len(RULES.values()) == len(set(RULES))


def test_findings_get_the_registered_id_whether_checked_or_called():
    cfg = compose_shipped(["recipe=dapo_sync", "inference.max_model_len=8192"]).config
    plan = make_plan(cfg)
    (called,) = fits_model_len(cfg, plan)
    (checked,) = RULES.get("SEQ001").fn(cfg, plan)
    assert called == checked and called.id == "SEQ001" and called.severity == "error"
    assert called.key == "inference.max_model_len" and not isinstance(called, Draft)


def test_a_registry_reads_like_its_names():
    reg: Registry[int] = Registry("thing")
    reg.register("b")(2)
    reg.register("a")(1)
    assert list(reg) == ["a", "b"] and "a" in reg and "c" not in reg and reg.values() == [1, 2]
