"""INF014: in-flight updates on vLLM need a release that reports which weight version sampled
which token (launcher/vllm_release.py weight_version_spans); the rule reads the installed
version from package metadata, so the tests set the version it sees."""
from launcher.plan import make_plan
from launcher.validate import RULES
from launcher.validate.rules import update_mode
from tests.shared_compose import compose_shipped

IN_FLIGHT = ["recipe=dapo_async", "inference.update_mode=in_flight"]


def _findings(overrides: list[str], version: str | None, monkeypatch) -> list:
    monkeypatch.setattr(update_mode, "installed_version", lambda: version)
    cfg = compose_shipped(overrides).config
    return list(RULES.get("INF014").fn(cfg, make_plan(cfg)))


def test_inf014_refuses_in_flight_on_a_release_without_weight_version_spans(monkeypatch):
    (refused,) = _findings(IN_FLIGHT, "0.26.0", monkeypatch)
    assert refused.key == "inference.update_mode" and "vLLM 0.26.0" in refused.message
    assert "weight_versions" in refused.why and "between_chunks" in refused.fix


def test_inf014_lets_in_flight_run_where_the_release_has_them_or_on_the_hf_engine(monkeypatch):
    assert _findings(IN_FLIGHT, "0.32.0+cpu", monkeypatch) == []
    assert _findings([*IN_FLIGHT, "inference.backend=hf"], "0.26.0", monkeypatch) == []
    assert _findings(["recipe=dapo_async"], "0.26.0", monkeypatch) == []
    assert _findings(IN_FLIGHT, None, monkeypatch) == []  # pre-commit: the engine's import names a missing vLLM
