"""Re-planning a recipe onto another cluster while keeping chosen batch quantities (launcher/plan/replan.py,
`plan --keep`): the 3-node DAPO recipe on 2 healthy nodes keeping 1536 sequences per step (docs/model.md
section 5, incident 10), and the other way round."""
import pytest

from launcher.plan.replan import replan_keeping
from launcher.validate import plan_and_check
from tests.shared_compose import compose_shipped

DAPO_3_NODES = ("recipe=dapo_sync", "cluster=b300x3", "inference.engines=3")


def test_replan_three_to_two_nodes(point):
    # the 3-node recipe on the 2 healthy nodes, re-planned keeping 1536 sequences per step
    composed = compose_shipped(["recipe=dapo_sync", "cluster=b300x2", "inference.engines=3"])
    adjusted, findings, plan = replan_keeping(composed, ["sequences_per_step"], plan_and_check)
    assert [f for f in findings if f.severity == "error"] == []
    assert adjusted.config.inference.engines == 2
    assert plan.batch.sequences_per_step == 1536
    assert (plan.mesh.world, plan.mesh.dp, plan.mesh.edp) == (16, 8, 2)
    assert (plan.batch.sequences_per_gpu_per_mini_batch, plan.batch.sequences_per_gpu_per_step) == (48, 192)
    # the 2-node recipe as shipped needs no re-plan
    b = point("recipe=dapo_sync").plan
    assert (b.mesh.dp, b.mesh.edp, b.batch.sequences_per_gpu_per_mini_batch, b.batch.sequences_per_gpu_per_step) == (
        8, 2, 48, 192)


@pytest.mark.slow
def test_replan_on_three_nodes_sets_three_engines(cli, tmp_path):
    import json

    out = cli("plan", "recipe=dapo_sync", "cluster=b300x3", "--keep", "sequences_per_step", "--format", "json",
              f"run.output_dir={tmp_path}")
    assert out.returncode == 0, out.stdout + out.stderr
    plan = json.loads(out.stdout)["plan"]
    assert plan["batch"]["sequences_per_step"] == 1536
    assert (plan["mesh"]["dp"], plan["mesh"]["edp"]) == (12, 3)
    assert "inference.engines=3" in plan["origins"]["replan"]
    assert "engines: 3" in (tmp_path / "dapo_sync" / "config.yaml").read_text()


def test_replan_changes_samples_when_they_cannot_divide(point):
    # 192 prompts x 8 samples = 1536 on 3 nodes: mini 32 x 8 = 256 does not divide dp 12
    composed = compose_shipped([*DAPO_3_NODES, "algorithm.samples_per_prompt=8", "algorithm.prompts_per_step=192"])
    assert "BATCH001" in {f.id for f in plan_and_check(composed)[0]}
    adjusted, findings, plan = replan_keeping(composed, ["sequences_per_step"], plan_and_check)
    assert "BATCH001" not in {f.id for f in findings}
    a = adjusted.config.algorithm
    assert plan.batch.sequences_per_step == a.prompts_per_step * a.samples_per_prompt == 1536
    assert (a.mini_batch_prompts * a.samples_per_prompt) % 12 == 0
