"""The colocated start-up in the planner (engines asleep + trainer built, then the first sync),
MEM008 that checks it, and the engines' sleep level derived from placement and sync kind.

The phase numbers are rebuilt here from the trainer's and the engine's own parts, so a part
the planner drops or double-counts fails the test; the sleep level is checked where it is
applied (vLLM's engine arguments, the host-memory model, plan.json and the printed plan).
"""
import pytest

from launcher.plan.memory_inference import ENGINE_ASLEEP_GIB
from launcher.plan.render import plan_tables
from launcher.plan.sync import transfer_buffer_bytes
from launcher.workers.vllm.args import engine_kwargs

GIB = 2**30
DAPO_ASYNC_ADAPTER = ("recipe=dapo_async", "trainer.lora.merge=false", "inference.lora_targets=[experts,q_proj]")


def _built_trainer_gib(tr) -> float:
    """What a trainer rank holds once built, before its first step: everything but activations."""
    return tr.weights_gib + tr.grads_gib + tr.optimizer_gib + tr.lora_gib + tr.runtime_gib


@pytest.mark.parametrize("recipe", ["dapo_sync", "dapo_fullft", "gsm8k_grpo"])
def test_startup_is_the_sleeping_engine_and_the_built_trainer(point, recipe):
    p = point(f"recipe={recipe}")
    mem, gpu = p.plan.memory, p.cfg.cluster.gpu
    ph = mem.colocated
    assert mem.sleep_level > 0
    assert ph.startup_gib == pytest.approx(_built_trainer_gib(mem.trainer) + ENGINE_ASLEEP_GIB["gpu"])
    bucket = transfer_buffer_bytes(p.cfg) / GIB
    assert ph.transfer_bucket_gib == pytest.approx(bucket) and bucket >= p.plan.sync.largest_tensor_bytes / GIB
    assert ph.first_sync_gib == pytest.approx(ph.startup_gib + mem.inference.weights_gib + bucket
                                              + ph.sync_temporaries_gib)
    assert max(ph.startup_gib, ph.first_sync_gib) <= gpu.memory_gib  # every shipped colocated recipe starts
    assert p.of("MEM008") == []


def test_awake_engines_next_to_a_building_trainer_do_not_fit(point):
    """The old start order (engines awake with their whole budget while the trainer builds)
    on dapo_sync: what sleep_level=0 still asks for, and MEM008 refuses it."""
    asleep, awake = point("recipe=dapo_sync"), point("recipe=dapo_sync", "inference.sleep_level=0")
    ph, im, cap = awake.plan.memory.colocated, awake.plan.memory.inference, awake.cfg.cluster.gpu.memory_gib
    assert ph.startup_gib == pytest.approx(_built_trainer_gib(awake.plan.memory.trainer) + im.budget_gib)
    assert ph.first_sync_gib == pytest.approx(ph.startup_gib + ph.transfer_bucket_gib + ph.sync_temporaries_gib)
    assert ph.startup_gib > cap >= asleep.plan.memory.colocated.first_sync_gib
    (finding,) = awake.of("MEM008")
    assert finding.severity == "error" and finding.key == "inference.sleep_level"
    assert f"needs {ph.first_sync_gib:,.1f} GiB per GPU" in finding.message and f"has {cap:,.1f} GiB" in finding.message
    assert "inference.sleep_level null" in finding.fix


def test_a_card_that_fits_every_step_but_not_the_first_sync(point):
    p = point("recipe=dapo_fullft", "cluster.gpu.memory_gib=170")
    ph = p.plan.memory.colocated
    assert ph.peak_gib < 170 < ph.first_sync_gib and p.of("MEM004") == []
    (finding,) = p.of("MEM008")
    assert finding.key == "trainer.mesh.ep"
    assert f"engine weights {p.plan.memory.inference.weights_gib:,.1f} GiB" in finding.message
    assert f"transfer bucket {ph.transfer_bucket_gib:,.1f} GiB" in finding.message


@pytest.mark.parametrize("overrides, level", [
    (("recipe=gsm8k_grpo",), 2),                   # merged, colocated
    (("recipe=dapo_fullft",), 2),                  # full fine-tuning, colocated
    (("recipe=dapo_sync",), 1),                    # adapter, colocated
    (("recipe=dapo_async",), 0),                   # merged, async
    (DAPO_ASYNC_ADAPTER, 0),                       # adapter, async
    (("recipe=tiny_dapo_async",), 0),              # full fine-tuning, async
    (("recipe=tiny_grpo",), 2),                    # full fine-tuning, colocated, hf engines on CPU
    (("recipe=gsm8k_grpo", "inference.sleep_level=1"), 1),   # an explicit value overrides
    (("recipe=dapo_sync", "inference.sleep_level=2"), 2),
    (("recipe=dapo_sync", "inference.sleep_level=0"), 0),
], ids=["merged-colocated", "full-colocated", "adapter-colocated", "merged-async", "adapter-async", "full-async",
        "tiny_grpo", "explicit-1-merged", "explicit-2-adapter", "explicit-0"])
def test_sleep_level_by_placement_and_sync_kind(point, overrides, level):
    p = point(*overrides)
    assert p.plan.memory.sleep_level == level
    origin = p.plan.origins["memory.sleep_level"]
    assert origin.startswith(f"memory.sleep_level={level} from ")
    explicit = p.cfg.inference.sleep_level
    assert ("inference.sleep_level (set" in origin) is (explicit is not None)


def test_the_resolved_level_is_what_engines_and_host_memory_use(point):
    derived, explicit = point("recipe=gsm8k_grpo"), point("recipe=gsm8k_grpo", "inference.sleep_level=1")
    never = point("recipe=gsm8k_grpo", "inference.sleep_level=0")
    gpn = derived.cfg.cluster.gpus_per_node
    assert derived.plan.memory.host.sleeping_engine_weights_gib == 0  # level 2 drops the weights
    assert explicit.plan.memory.host.sleeping_engine_weights_gib == pytest.approx(
        gpn * explicit.plan.memory.inference.weights_gib)
    for p, sleeps in ((derived, True), (explicit, True), (never, False)):
        assert engine_kwargs(p.cfg, p.plan, "/models/x", on_cpu=False, seed=0)["enable_sleep_mode"] is sleeps


def test_explicit_level_one_with_merged_sync_warns_with_the_host_ram_it_keeps(point):
    p = point("recipe=gsm8k_grpo", "inference.sleep_level=1")
    (finding,) = p.of("INF010")
    host = 8 * p.plan.memory.inference.weights_gib
    assert finding.severity == "warning" and finding.key == "inference.sleep_level"
    assert f"keeps {host:,.1f} GiB of weights per node in host RAM that the next sync re-sends anyway" in finding.message
    assert point("recipe=dapo_sync", "inference.sleep_level=1").of("INF010") == []  # adapter sync keeps its base


def test_startup_phase_in_plan_json_and_the_printed_plan(point):
    p = point("recipe=dapo_sync")
    ph = p.plan.to_dict()["memory"]["colocated"]
    assert ph["startup_gib"] == p.plan.memory.colocated.startup_gib
    assert ph["first_sync_gib"] == p.plan.memory.colocated.first_sync_gib
    assert p.plan.to_dict()["memory"]["sleep_level"] == 1
    text = plan_tables(p.plan)
    assert f"start-up: engines asleep, trainer built            {ph['startup_gib']:,.1f} GiB" in text
    assert f"{ph['first_sync_gib']:,.1f} GiB" in text and "engine sleep level" in text
    assert "start-up" not in plan_tables(point("recipe=dapo_async").plan)  # async groups never share a GPU


SLICE_MERGED = ("recipe=tiny_grpo_chat", "model=glm5_3_flash_4layer", "cluster=h200x1", "inference.engines=1",
                "trainer.backend=megatron", "trainer.lora.rank=16", "trainer.lora.alpha=32",
                "trainer.lora.targets=[linear_proj,linear_fc1,linear_fc2,q_proj,k_proj,v_proj,o_proj]")


def test_first_sync_counts_the_trainers_merge(point):
    """The 4-layer slice on one H200 (docs/results.md): the trainer merges one expert's fc1 at
    a time (it holds all 288); with EP its stack of experts is copied to be gathered whole
    (gate and up). The hf engine copies experts into place and adds nothing."""
    a = point(*SLICE_MERGED).cfg.model.arch
    gate_gib = a.n_routed_experts * a.moe_intermediate_size * a.hidden_size * 2 / GIB
    slice_ = point(*SLICE_MERGED).plan.memory.colocated
    assert slice_.sync_temporaries_gib == pytest.approx(2 * gate_gib / a.n_routed_experts)
    attention_only = point(*SLICE_MERGED, "trainer.lora.targets=[linear_proj,q_proj]").plan.memory.colocated
    assert attention_only.sync_temporaries_gib == 0
    split = point(*SLICE_MERGED, "cluster.gpus_per_node=2", "trainer.mesh.ep=2").plan.memory.colocated
    assert split.sync_temporaries_gib == pytest.approx(2 * gate_gib / 2)
    assert point("recipe=dapo_sync").plan.memory.colocated.sync_temporaries_gib == 0  # adapter sync, vLLM engines
