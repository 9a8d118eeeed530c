"""Every pair of choices runs or is refused by a rule (issue 41): trainer backend x placement
x LoRA x sync x algorithm x trainer mesh x routing / indexer replay on the tiny GLM, covering every pair of values (not every
combination) with a greedy all-pairs set. Backends, placements and algorithms are the
schema's own choices (a new member joins the matrix); LoRA and sync are the
trainer.lora settings that select them, mesh and replay the trainer.mesh and algorithm keys.

Each point validate accepts runs one step through `python -m launcher` (Ray, the real
loop, weight sync and all) and must finish with exit 0; each point it refuses must be
refused only by registered rules. The engine is hf (vLLM has its own CPU set).
"""
import itertools

import pytest
from launch_helpers import SMALL

from launcher.config.schema.choices import AlgorithmName, PlacementMode, TrainerBackendName
from launcher.exit_codes import ExitCode
from launcher.validate import RULES, plan_and_check
from tests.shared_compose import compose_shipped

pytestmark = pytest.mark.slow

BASE = ["recipe=tiny_grpo", "run.steps=1", "checkpoint.every_steps=100", *SMALL]
PLACEMENT = {
    PlacementMode.colocated: [],
    PlacementMode["async"]: ["cluster.nodes=2", "cluster.gpus_per_node=2", "placement.mode=async",
                             "placement.trainer_nodes=1", "placement.inference_nodes=1", "inference.engines=1",
                             "algorithm.max_staleness=2"],
}
"""What each placement needs on the local cluster: two trainer GPUs either way (so the tp2 mesh
fits), one engine apart in async (tiny_grpo is colocated on two GPUs)."""
ATTENTION = "linear_proj,q_proj,k_proj,v_proj,o_proj"
LORA = {
    "none": [],
    "dense": ["trainer.lora.rank=4", "trainer.lora.alpha=8", f"trainer.lora.targets=[{ATTENTION}]"],
    "experts": ["trainer.lora.rank=4", "trainer.lora.alpha=8", f"trainer.lora.targets=[{ATTENTION},linear_fc1,linear_fc2]"],
}
"""No LoRA (full fine-tuning and full sync), attention only, and with the MLPs' fused routed experts."""
SYNC = {"merged": ["trainer.lora.merge=true"], "adapter": ["trainer.lora.merge=false"]}
MESH = {"dp": [], "tp2": ["trainer.mesh.tp=2", "trainer.mesh.sequence_parallel=true"]}
"""Two data-parallel ranks, or one TP pair with sequence parallelism (the hf trainer refuses it)."""
REPLAY = {"none": [], "routes": ["algorithm.routing_replay=true"],
          "routes_pools": ["algorithm.routing_replay=true", "algorithm.indexer_replay=true"]}
FACTORS = {
    "backend": {b.value: [f"trainer.backend={b.value}"] for b in TrainerBackendName},
    "placement": {p.value: PLACEMENT[p] for p in PlacementMode},
    "lora": LORA,
    "sync": SYNC,
    "algorithm": {a.value: [f"algorithm.name={a.value}"] for a in AlgorithmName},
    "mesh": MESH,
    "replay": REPLAY,
}


def all_pairs(factors: dict[str, dict]) -> list[dict[str, str]]:
    """A small set of points covering every pair of values of every two factors: greedy, each
    point the first (in product order) of those covering the most pairs still uncovered."""
    names = list(factors)
    candidates = [dict(zip(names, values, strict=True)) for values in itertools.product(*factors.values())]

    def pairs(point):
        return {((a, point[a]), (b, point[b])) for a, b in itertools.combinations(names, 2)}

    uncovered = set().union(*map(pairs, candidates))
    chosen = []
    while uncovered:
        best = max(candidates, key=lambda p: len(pairs(p) & uncovered))
        chosen.append(best)
        uncovered -= pairs(best)
    return chosen


POINTS = all_pairs(FACTORS)


def _overrides(point: dict[str, str]) -> list[str]:
    return BASE + [o for name, value in point.items() for o in FACTORS[name][value]]


def test_the_matrix_covers_every_pair_in_few_points():
    """Every value of every factor appears with every value of every other one."""
    for a, b in itertools.combinations(FACTORS, 2):
        seen = {(p[a], p[b]) for p in POINTS}
        assert seen == set(itertools.product(FACTORS[a], FACTORS[b])), (a, b)
    assert len(POINTS) <= 11, POINTS  # at least 3 x 3 (LoRA x replay)


@pytest.mark.parametrize("point", POINTS, ids=["-".join(p.values()) for p in POINTS])
def test_each_point_runs_a_step_or_is_refused_by_a_rule(point, launch_run):
    overrides = _overrides(point)
    findings, _ = plan_and_check(compose_shipped(overrides))
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        assert all(f.id in RULES for f in errors), [f.id for f in errors]
        return
    name = "-".join(point.values())
    code, _, err = launch_run(name, overrides).finish(timeout_s=300)
    assert code == ExitCode.OK, err[-3000:]
