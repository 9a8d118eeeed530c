"""Mesh search and sweeps: legal layouts only, numbers and findings equal the planner's and the
validator's, illegal points skipped."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.plan import MODEL_PARTS, make_plan
from launcher.search import search
from launcher.search.enumerate import VARIED, VARIED_CONFIG, candidates
from launcher.validate import check
from launcher.validate.split import split_rules
from tests.shared_compose import compose_shipped

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def dapo_sync_search():
    return search(compose_shipped(["recipe=dapo_sync"]).config)


def _find(result, **mesh):
    return [p for p in result.meshes if all(getattr(p, k) == v for k, v in mesh.items())]


def test_lists_the_known_good_layouts(dapo_sync_search):
    tp2 = _find(dapo_sync_search, tp=2, ep=8, etp=1, inference_engines=2, inference_tp=8)
    tp4 = _find(dapo_sync_search, tp=4, ep=8, etp=1, inference_engines=2, inference_tp=8)
    assert len(tp2) == 1 and tp2[0].edp == 2 and tp2[0].dp == 8
    assert len(tp4) == 1 and tp4[0].edp == 2


def test_every_listed_mesh_respects_the_model_rules(dapo_sync_search):
    assert dapo_sync_search.meshes
    for p in dapo_sync_search.meshes:
        assert p.pp == 1 and p.cp == 1  # mHC and KDA
        assert 16 % (p.ep * p.etp) == 0 and 288 % p.ep == 0 and 64 % p.tp == 0
    assert dapo_sync_search.candidates > len(dapo_sync_search.meshes)
    assert "MESH004" in dapo_sync_search.rejected_by_rule


def test_numbers_equal_the_planner(dapo_sync_search):
    (row,) = _find(dapo_sync_search, tp=2, ep=8, etp=1, inference_engines=2, inference_tp=8)
    cfg = compose_shipped(["recipe=dapo_sync"]).config
    plan = make_plan(cfg)
    assert not [f for f in check(cfg, plan) if f.severity == "error"]
    assert row.trainer_gib == pytest.approx(plan.memory.trainer.total_gib)
    assert row.inference_gib == pytest.approx(plan.memory.inference.total_gib)
    assert row.colocated_peak_gib == pytest.approx(plan.memory.colocated.peak_gib)


def test_ranked_by_estimated_step_time(dapo_sync_search):
    steps = [p.step.total_s for p in dapo_sync_search.meshes]
    assert steps == sorted(steps) and steps[0] > 0


def test_async_layouts_use_only_inference_nodes():
    result = search(compose_shipped(["recipe=dapo_async"]).config)
    assert result.meshes
    assert all(p.inference_engines * p.inference_tp <= 8 and p.dp * p.tp <= 8 for p in result.meshes)


# Each fires a rule that reads no mesh path, so the reused findings are not empty.
FIXED_FAILURES = ("algorithm.temperature=0", "trainer.recompute.granularity=full", "data.train_path=missing.jsonl",
                  "model.language_model_only=false")


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [("recipe=dapo_sync", "cluster=b300x2"), ("recipe=dapo_async",),
                                       ("recipe=dapo_sync", "cluster=b300x2", *FIXED_FAILURES)],
                         ids=["dapo_sync", "dapo_async", "fixed_rules_fire"])
def test_reused_findings_equal_a_full_validate_of_every_candidate(overrides):
    cfg = compose_shipped(list(overrides)).config
    base = make_plan(cfg)
    rules = split_rules(cfg, base, VARIED)
    assert len(rules.fixed_ids) >= 25  # the search really skips them per candidate
    if FIXED_FAILURES[0] in overrides:
        assert {"ALGO005", "RECOMP001", "DATA002", "MODEL001"} <= {f.id for f in rules.fixed}
    n = 0
    for variant in candidates(cfg, base):
        plan = make_plan(variant)
        assert rules.check(variant, plan) == check(variant, plan)
        assert all(getattr(plan, part) == getattr(base, part) for part in MODEL_PARTS)
        n += 1
    assert n >= 100


def _leaves(obj, path: str):
    if not dataclasses.is_dataclass(obj):
        yield path, obj
        return
    for f in dataclasses.fields(obj):
        yield from _leaves(getattr(obj, f.name), f"{path}.{f.name}")


@pytest.mark.parametrize("recipe", ["dapo_sync", "dapo_async"])
def test_candidates_differ_from_the_recipe_only_under_the_varied_paths(recipe):
    cfg = compose_shipped([f"recipe={recipe}"]).config
    base = dict(_leaves(cfg, "cfg"))
    changed = set()
    for variant in candidates(cfg, make_plan(cfg)):
        changed |= {path for path, value in _leaves(variant, "cfg") if value != base[path]}
    assert "cfg.trainer.mesh.tp" in changed
    assert all(any(path == v or path.startswith(v + ".") for v in VARIED_CONFIG) for path in changed), changed


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_mesh_cli_json_and_plot(tmp_path):
    out = _cli("mesh", "recipe=dapo_sync", f"run.output_dir={tmp_path}", "--format", "json")
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    keys = {"tp", "pp", "cp", "ep", "etp", "dp", "edp", "inference_engines", "inference_tp", "trainer_gib",
            "inference_gib", "colocated_peak_gib", "headroom_gib", "estimated_step_s"}
    assert keys <= set(payload["meshes"][0])
    assert (tmp_path / "dapo_sync" / "mesh.png").stat().st_size > 10_000


def test_multirun_plan_skips_illegal_points_and_starts_no_ray(tmp_path):
    probe = ("import sys, runpy; sys.argv = ['launcher'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('launcher', run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "print('RAY_LOADED' if 'ray' in sys.modules else 'NO_RAY')")
    out = subprocess.run([sys.executable, "-c", probe, "-m", "plan", "recipe=dapo_sync", "trainer.mesh.ep=7,8",
                          f"run.output_dir={tmp_path}", "--format", "json"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    payload = json.loads(out.stdout[: out.stdout.rindex("}") + 1])
    status = {p["overrides"][1]: p for p in payload["points"]}
    assert status["trainer.mesh.ep=7"]["status"] == "illegal"
    assert status["trainer.mesh.ep=7"]["first_error"].startswith("MESH")
    assert status["trainer.mesh.ep=8"]["status"] == "legal"
    assert sorted(p.name for p in (tmp_path / "dapo_sync" / "sweep").iterdir()) == ["1"]
    assert out.stdout.strip().endswith("NO_RAY")
