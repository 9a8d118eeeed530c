"""The installed vLLM release against the config (INF012, INF013): each rule reads the version
from package metadata, so the tests set the version the rules see."""
import pytest

from launcher.plan import make_plan
from launcher.validate import RULES
from launcher.validate.rules import vllm_release as rules
from launcher.vllm_release import RELEASES, installed_release, release_of
from tests.shared_compose import compose_shipped

QMOE = ["recipe=tiny_grpo_chat", "model=qwen3_moe_4layer", "cluster=h200x1", "inference.backend=vllm",
        "inference.engines=1", "trainer.lora.rank=16", "trainer.lora.alpha=32",
        "trainer.lora.targets=[q_proj,k_proj,v_proj,o_proj]", "inference.max_model_len=320"]


def _findings(rule_id: str, overrides: list[str], version: str | None, monkeypatch) -> list:
    monkeypatch.setattr(rules, "installed_version", lambda: version)
    cfg = compose_shipped(overrides).config
    return list(RULES.get(rule_id).fn(cfg, make_plan(cfg)))


GLM = ["recipe=dapo_sync", "cluster=h200x1", "model=glm5_3_flash_4layer", "inference.engines=1", "inference.tp=1",
       "trainer.mesh.tp=1", "trainer.mesh.ep=1", "trainer.mesh.sequence_parallel=false"]


def test_release_lines_parse_local_builds():
    assert release_of("0.26.0") is RELEASES["0.26"] and release_of("0.32.0+cpu") is RELEASES["0.32"]
    assert release_of("0.33.0") is RELEASES["0.33"] and release_of("0.34.0") is RELEASES["0.34"]
    assert release_of("0.29.1") is None and release_of("0.35.0") is None and release_of("1.0.0") is None


def test_only_the_lines_that_ran_are_named_tested():
    """TESTED, which every fix offers, names exactly the lines that ran through the launcher."""
    from launcher.vllm_release import SOURCE_CHECKED, TESTED

    ran = {line for line, release in RELEASES.items() if release.ran_through_launcher}
    assert ran == {"0.26", "0.32"} and all(f"{line}.x" in TESTED for line in ran)
    assert all(f"{line}.x" in SOURCE_CHECKED for line in RELEASES.keys() - ran)


def test_an_unknown_or_missing_release_fails_the_engine_with_the_fix(monkeypatch):
    import launcher.vllm_release as module

    monkeypatch.setattr(module, "installed_version", lambda: "0.29.1")
    with pytest.raises(ImportError, match=r"vLLM 0.29.1 is not a release .* install 0.26.x.* or 0.34.x"):
        installed_release()
    monkeypatch.setattr(module, "installed_version", lambda: "0.34.0")
    assert installed_release() is RELEASES["0.34"]  # the engine starts; INF012 warned before Ray


def test_inf012_names_the_installed_release(monkeypatch):
    (unknown,) = _findings("INF012", QMOE, "0.29.1", monkeypatch)
    assert unknown.key == "inference.backend" and "vLLM 0.29.1" in unknown.message and "0.26.x" in unknown.fix
    assert unknown.severity == "error" and "0.34.x" in unknown.fix
    (old,) = [f for f in _findings("INF012", GLM, "0.26.0", monkeypatch) if "Glm5Next" in f.why]
    assert "vLLM 0.26.0" in old.message and "qwen3_moe_4layer" in old.fix and "0.34.x" in old.fix
    assert _findings("INF012", GLM, "0.32.0", monkeypatch) == []
    assert _findings("INF012", QMOE, "0.26.0", monkeypatch) == []
    assert _findings("INF012", QMOE, None, monkeypatch) == []  # pre-commit, checks-only installs


@pytest.mark.parametrize("version", ["0.34.0", "0.33.0"])
def test_inf012_lets_a_source_checked_release_run_with_a_warning(version, monkeypatch):
    """Route 2: GLM-5.3-Flash on 0.34 (then 0.33) passes validation, warned that the release was
    checked against its source only and told what to report; nothing else fires, async NCCL included."""
    (warned,) = _findings("INF012", GLM, version, monkeypatch)
    assert warned.severity == "warning" and warned.key == "inference.backend"
    assert f"vLLM {version}" in warned.message and "source only" in warned.message
    assert "docs/vllm_route2.md" in warned.why and "issue 40" in warned.fix and "0.32.x" in warned.fix
    assert [f.severity for f in _findings("INF012", ["recipe=dapo_async"], version, monkeypatch)] == ["warning"]
    adapter = [*QMOE, "trainer.lora.merge=false", "inference.lora_targets=[q_proj,k_proj,v_proj,o_proj,experts]"]
    assert _findings("INF013", adapter, version, monkeypatch) == []


def test_inf012_refuses_async_nccl_on_026(monkeypatch):
    found = _findings("INF012", ["recipe=dapo_async"], "0.26.0", monkeypatch)
    (nccl,) = [f for f in found if f.key == "placement.mode"]
    assert "NCCL" in nccl.message and {f.key for f in found} == {"placement.mode", "inference.backend"}  # + GLM
    assert _findings("INF012", ["recipe=dapo_async"], "0.32.1", monkeypatch) == []


def test_inf013_adapter_sync_on_moe_needs_the_base_from_disk_on_026(monkeypatch):
    adapter = [*QMOE, "trainer.lora.merge=false", "inference.lora_targets=[q_proj,k_proj,v_proj,o_proj,experts]"]
    (refused,) = _findings("INF013", adapter, "0.26.0", monkeypatch)
    assert refused.key == "trainer.lora.merge" and "FusedMoEWithLoRA" in refused.why
    assert _findings("INF013", adapter, "0.32.0", monkeypatch) == []
    assert _findings("INF013", [*QMOE, "trainer.lora.merge=true"], "0.26.0", monkeypatch) == []


def test_fp8_engines_need_a_release_with_online_block_quantization(monkeypatch):
    """INF020: 0.26 is refused (its source was not read for fp8_per_block); 0.32-0.34 and no vLLM
    installed pass with a warning that FP8 engines have not run through the launcher."""
    from launcher.validate.rules import fp8

    cfg = compose_shipped([*GLM, "inference.backend=vllm", "inference.weights_dtype=fp8"]).config
    for version, refused in (("0.26.0", True), ("0.32.0", False), ("0.34.0", False), (None, False)):
        monkeypatch.setattr(fp8, "installed_version", lambda v=version: v)
        (found,) = RULES.get("INF020").fn(cfg, make_plan(cfg))
        assert found.severity == ("error" if refused else "warning"), (version, found)
        assert ("with vLLM 0.26.0 installed" if refused else "have not run through the launcher") in found.message
