"""The planner: exact parameter counts, mesh, placement, batch chain, memory, sync, timing, env.

Numbers come from docs/model.md (sections 1-3 and 6); the HF comparison builds the real
`Glm5NextForConditionalGeneration` on the meta device and counts its non-vision parameters.
"""
import json

import pytest

from launcher.plan.params import count_params, indexer_params, kda_split, mhc_params, mla_split

GIB = 2**30
DSA_LAYERS, KDA_LAYERS, MOE_LAYERS = 11, 34, 42


# --------------------------------------------------------------------------- parameters

@pytest.mark.parametrize("overrides, total, active", [
    (["model=glm5_3_flash"], 313_326_816_766, 17_376_726_526),
    (["model=glm5_3_flash", "model.arch.index_kpool=4"], 313_326_799_870, 17_376_709_630),
    (["model=glm5_3_flash_4layer"], 23_783_374_360, 2_644_082_200),
], ids=["glm5_3_flash", "glm5_3_flash-kpool4", "glm5_3_flash_4layer"])
def test_exact_param_counts(point, overrides, total, active):
    p = point("recipe=dapo_sync", *overrides)
    assert (p.plan.params.total, p.plan.params.active) == (total, active)


def test_per_component_counts_match_domain(point):
    """DOMAIN 1: per-layer counts, reproduced from the config fields."""
    a = point("recipe=dapo_sync").cfg.model.arch
    params = count_params(a)
    assert kda_split(a).total == 137_732_288
    assert mla_split(a).total == 117_442_560
    assert indexer_params(a) == 7_473_408
    assert params.expert_one == 25_165_824 == 3 * 4096 * 2048
    assert mhc_params(a) == 786_486
    c = params.components
    assert c["embedding"] == c["lm_head"] == 634_388_480
    assert c["attention.linear_attention"] == KDA_LAYERS * 137_732_288
    assert c["attention.indexed_attention"] == DSA_LAYERS * (117_442_560 + 7_473_408)
    assert c["mlp.routed_experts"] == MOE_LAYERS * 288 * 25_165_824
    assert round(c["mlp.routed_experts"] / 1e9, 1) == 304.4
    assert c["mhc"] == 45 * 786_486
    # the TP / replicated / expert split covers every parameter exactly once
    s = params.split
    assert s.tp + s.rep + s.exp == params.total and s.exp == c["mlp.routed_experts"]


def test_components_sum_to_total(point):
    params = point("recipe=dapo_sync").plan.params
    assert sum(params.components.values()) == params.total


def test_kpool_changes_only_the_pool_position_embedding(point):
    """DOMAIN 1: the k-pool position embedding is kpool x 128 per indexer (11 DSA layers)."""
    k16 = point("recipe=dapo_sync").plan.params
    k4 = point("recipe=dapo_sync", "model.arch.index_kpool=4").plan.params
    assert k16.total - k4.total == DSA_LAYERS * (16 - 4) * 128
    assert k16.active - k4.active == DSA_LAYERS * (16 - 4) * 128


TINY = ["recipe=tiny_grpo"]
HF_MATCHING = {
    "tiny": TINY,
    "tiny-kpool8": TINY + ["model.arch.index_kpool=8"],
    "tiny-6layers-6experts-top3-hc2": TINY + [
        "model.arch.num_hidden_layers=6", "model.arch.n_routed_experts=6", "model.arch.num_experts_per_tok=3",
        "model.arch.hc_mult=2", "model.arch.indexer_types=null",
        "model.arch.layer_types=[indexed_attention,linear_attention,indexed_attention,linear_attention,"
        "linear_attention,linear_attention]",
        "model.arch.mlp_layer_types=[dense,dense,sparse,sparse,sparse,sparse]"],
    "tiny-tied-2shared": TINY + ["model.arch.tie_word_embeddings=true", "model.arch.n_shared_experts=2"],
    "glm5_3_flash": ["recipe=dapo_sync"],
    "glm5_3_flash_4layer": ["recipe=dapo_sync", "model=glm5_3_flash_4layer"],
    "tiny-kpool1": TINY + ["model.arch.index_kpool=1"],
    "tiny-shared-indexer": TINY + ["model.arch.layer_types=[indexed_attention,linear_attention,indexed_attention,"
                                   "linear_attention]", "model.arch.indexer_types=[full,full,shared,full]"],
    "tiny-hc1": TINY + ["model.arch.hc_mult=1"],
}


@pytest.fixture(scope="module")
def hf_param_count():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import dataclasses

    def count(arch) -> int:
        text = {k: v for k, v in dataclasses.asdict(arch).items() if v is not None}
        text.pop("model_type")
        text["pad_token_id"] = 0  # HF's default pad id lies outside a small vocabulary
        vision = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=16, patch_size=2, image_size=4,
                      spatial_merge_size=1, temporal_patch_size=1, projection_intermediate_size=16,
                      out_hidden_size=arch.hidden_size)
        config = transformers.Glm5NextConfig(text_config=text, vision_config=vision,
                                             tie_word_embeddings=arch.tie_word_embeddings)
        with torch.device("meta"):
            model = transformers.Glm5NextForConditionalGeneration(config)
        return sum(p.numel() for name, p in model.named_parameters() if "visual" not in name)

    return count


@pytest.mark.slow  # importing torch + transformers alone takes ~6 s on the 2-core machine
@pytest.mark.parametrize("overrides", [pytest.param(o, id=name) for name, o in HF_MATCHING.items()])
def test_count_params_matches_hf_meta_build(point, hf_param_count, overrides):
    arch = point(*overrides).cfg.model.arch
    assert count_params(arch).total == hf_param_count(arch)


# --------------------------------------------------------------------------- mesh and placement

@pytest.mark.parametrize("overrides, dp, edp, experts_per_gpu", [
    (["recipe=dapo_sync"], 8, 2, 36),
    (["recipe=dapo_sync", "cluster=b300x3", "inference.engines=3"], 12, 3, 36),
    (["recipe=dapo_fullft"], 16, 1, 9),
    (["recipe=gsm8k_grpo"], 4, 1, 36),
    (["recipe=dapo_async"], 4, 1, 36),
    (["recipe=dapo_sync", "trainer.mesh.tp=4"], 4, 2, 36),  # DOMAIN 2: 16 GPUs, TP4 EP8 ETP1 -> DP4, EDP2
])
def test_mesh(point, overrides, dp, edp, experts_per_gpu):
    m = point(*overrides).plan.mesh
    assert (m.dp, m.edp, m.experts_per_gpu) == (dp, edp, experts_per_gpu)
    assert m.ok


def test_unset_etp_resolves_to_tp(point):
    m = point("recipe=dapo_sync", "trainer.mesh.etp=null").plan.mesh
    assert (m.etp, m.edp) == (2, 1)
    m = point("recipe=gsm8k_grpo", "trainer.mesh.etp=null").plan.mesh
    assert m.etp == 2 and m.edp is None and not m.ok  # expert grid 16 on 8 GPUs


def test_mesh_that_does_not_divide_is_reported_not_raised(point):
    p = point("recipe=dapo_sync", "trainer.mesh.tp=32")
    assert p.plan.mesh.dp is None and not p.plan.mesh.ok
    assert "MESH001" in p.ids


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_vocab_padded_to_128_tp(point, tp):
    m = point("recipe=dapo_sync", f"trainer.mesh.tp={tp}").plan.mesh
    assert m.padded_vocab % (128 * tp) == 0 and 154_880 <= m.padded_vocab < 154_880 + 128 * tp


def test_colocated_placement_shares_every_gpu(point):
    pl = point("recipe=dapo_sync").plan.placement
    assert pl.mode == "colocated" and pl.trainer_nodes == pl.inference_nodes == [0, 1]
    assert len(pl.trainer_slots) == 16 and pl.gpus_needed == 16
    assert [{s.node for s in e} for e in pl.engine_slots] == [{0}, {1}]
    assert {s for e in pl.engine_slots for s in e} == set(pl.trainer_slots)


def test_async_placement_is_disjoint(point):
    pl = point("recipe=dapo_async").plan.placement
    assert (pl.trainer_nodes, pl.inference_nodes) == ([0], [1])
    assert {s.node for s in pl.trainer_slots} == {0}
    assert [len(e) for e in pl.engine_slots] == [8] and {s.node for s in pl.engine_slots[0]} == {1}
    assert pl.gpus_needed == 16


# --------------------------------------------------------------------------- batch chain

def test_batch_chain_dapo_sync(point):
    b = point("recipe=dapo_sync").plan.batch
    assert b.sequences_per_step == 1536 and b.mini_batches_per_step == 4 and b.sequences_per_mini_batch == 384
    assert b.sequences_per_gpu_per_mini_batch == 48 and b.sequences_per_gpu_per_step == 192
    assert b.max_seq_len == 10240 and b.sequences_per_microbatch == 1 and b.micro_batches_per_mini_batch == 48
    assert b.tokens_per_step == 1536 * 10240


def test_batch_chain_packs_short_sequences(point):
    b = point("recipe=gsm8k_grpo").plan.batch
    assert (b.sequences_per_step, b.sequences_per_gpu_per_mini_batch, b.max_seq_len) == (256, 64, 1536)
    assert b.sequences_per_microbatch == 4096 // 1536 and b.micro_batches_per_mini_batch == 32


# --------------------------------------------------------------------------- memory

def test_tp2_ep8_weights_per_gpu(point):
    """DOMAIN 3: TP2/EP8 on 8 GPUs: 76.1 GB of experts + 8.6 GiB non-expert = ~79.5 GiB bf16 per GPU."""
    p = point("recipe=gsm8k_grpo")
    assert p.plan.memory.trainer.weights_gib == pytest.approx(79.5, rel=0.01)
    s = p.plan.params.split
    assert s.exp / 8 * 2 / 1e9 == pytest.approx(76.1, rel=0.01)
    assert (s.tp / 2 + s.rep) * 2 / GIB == pytest.approx(8.6, rel=0.01)


def test_trainer_memory_lora_vs_full(point):
    lora = point("recipe=dapo_sync").plan.memory.trainer
    assert lora.grads_gib == lora.optimizer_gib == 0 and lora.lora_gib > 0
    on_gpu = point("recipe=dapo_fullft").plan.memory.trainer  # cpu_offload: false (MEM007)
    assert on_gpu.grads_gib == pytest.approx(2 * on_gpu.weights_gib)  # fp32 grads of bf16 weights
    assert on_gpu.optimizer_gib > 0 and on_gpu.optimizer_host_gib == 0
    on_host = point("recipe=dapo_fullft", "trainer.optimizer.cpu_offload=true").plan.memory.trainer
    assert on_host.optimizer_gib == 0 and on_host.optimizer_host_gib == pytest.approx(on_gpu.optimizer_gib)
    for t in (lora, on_gpu, on_host):
        parts = t.weights_gib + t.grads_gib + t.optimizer_gib + t.lora_gib + t.activations_gib + t.runtime_gib
        assert t.total_gib == pytest.approx(parts)


def test_recompute_and_mhc_streams_drive_activations(point):
    selective = point("recipe=dapo_sync").plan.memory.trainer.activations_gib
    none = point("recipe=dapo_sync", "trainer.recompute.granularity=none", "trainer.recompute.modules=[]")
    assert none.plan.memory.trainer.activations_gib > selective
    one_stream = point("recipe=dapo_sync", "model.arch.hc_mult=1").plan.memory.trainer.activations_gib
    assert one_stream < selective  # the mHC residual stream is hc_mult x wider


def test_colocated_phases_and_peak(point):
    mem = point("recipe=dapo_sync").plan.memory
    ph = mem.colocated
    assert ph.peak_gib == max(ph.generation_gib, ph.training_gib)
    assert ph.generation_gib >= mem.inference.budget_gib
    assert ph.training_gib >= mem.trainer.total_gib
    awake = point("recipe=dapo_sync", "inference.sleep_level=0").plan.memory.colocated
    assert awake.training_gib == pytest.approx(mem.trainer.total_gib + mem.inference.budget_gib)
    assert point("recipe=dapo_async").plan.memory.colocated is None


def test_an_hf_engine_holds_its_weights_and_cache_not_the_whole_budget(point):
    """vLLM preallocates gpu_memory_utilization; the hf engine allocates what it uses (the slice on
    the H200: 46.6 GiB sampled in generation, 97.9 GiB budget)."""
    slice4 = ("recipe=tiny_grpo_chat", "model=glm5_3_flash_4layer", "cluster=h200x1", "inference.engines=1",
              "trainer.backend=megatron", "model.dtype=bfloat16")
    mem = point(*slice4).plan.memory
    assert mem.colocated.generation_gib == pytest.approx(mem.inference.total_gib + mem.trainer.runtime_gib)
    assert mem.colocated.generation_gib < 0.6 * mem.inference.budget_gib
    vllm = point(*slice4, "inference.backend=vllm").plan.memory
    assert vllm.colocated.generation_gib == pytest.approx(vllm.inference.budget_gib + vllm.trainer.runtime_gib)


def test_host_memory_counts_sleeping_engine_weights(point):
    mem = point("recipe=dapo_sync").plan.memory
    assert mem.host.sleeping_engine_weights_gib == pytest.approx(8 * mem.inference.weights_gib)
    level2 = point("recipe=dapo_sync", "inference.sleep_level=2").plan.memory.host
    assert level2.sleeping_engine_weights_gib == 0


def test_inference_cache_per_sequence_and_token(point):
    """DOMAIN 3: KDA state 140.8 MiB per sequence over 34 layers (/ TP); DSA 1024 B + 132 B per pool per layer."""
    inf = point("recipe=dapo_sync", "model.arch.index_kpool=4").plan.memory.inference
    assert inf.kda_state_mib_per_seq * 8 == pytest.approx(KDA_LAYERS * (4 + 144 / 1024), rel=1e-9)
    assert round(inf.kda_state_mib_per_seq * 8, 1) == 140.8
    assert inf.dsa_cache_kib_per_token * 1024 == pytest.approx(DSA_LAYERS * (1024 + 132 / 4))
    assert inf.weights_gib == pytest.approx(point("recipe=dapo_sync").plan.params.total * 2 / 8 / GIB, rel=0.01)


# --------------------------------------------------------------------------- LoRA, sync, timing

def test_lora_expert_rank_normalised_by_top_k(point):
    assert point("recipe=dapo_sync").plan.lora.expert_rank == 64 // 8
    assert point("recipe=gsm8k_grpo").plan.lora.expert_rank == 32  # normalize_moe_lora off


def test_the_plan_says_whether_lora_is_on(point):
    """plan.lora.enabled is the one answer the rules, the trainers and the export read."""
    assert point("recipe=dapo_sync").plan.lora.enabled is True
    full = point("recipe=dapo_fullft").plan.lora
    assert (full.enabled, full.rank, full.expert_rank) == (False, 0, 0)


@pytest.mark.parametrize("recipe, kind, link", [
    ("dapo_sync", "adapter", "intra_node"),
    ("gsm8k_grpo", "merged", "intra_node"),
    ("dapo_async", "merged", "inter_node"),
    ("dapo_fullft", "full", "intra_node"),
])
def test_weight_sync_kind_and_link(point, recipe, kind, link):
    p = point(f"recipe={recipe}").plan
    assert (p.sync.kind, p.sync.link) == (kind, link)
    expected = p.lora.params_shipped * 2 if kind == "adapter" else p.params.total * 2
    assert p.sync.bytes_per_engine == expected


def test_adapter_sync_is_a_small_fraction_of_merged(point):
    adapter = point("recipe=dapo_sync").plan.sync
    merged = point("recipe=dapo_sync", "trainer.lora.merge=true").plan.sync
    assert adapter.bytes_per_engine < merged.bytes_per_engine / 20 and adapter.seconds < merged.seconds


def test_recommended_nccl_timeout_follows_the_longest_wait(point):
    t = point("recipe=dapo_sync").plan.timing
    assert t.longest_wait_s == max(t.generation_s, t.logprob_pass_s, t.train_s / 4)
    assert t.recommended_nccl_timeout_s >= max(600, 2 * t.longest_wait_s)
    assert t.recommended_nccl_timeout_s % 60 == 0
    longer = point("recipe=dapo_sync", "algorithm.max_response_len=16384", "inference.max_model_len=20000",
                   "trainer.max_tokens_per_microbatch=20000").plan.timing
    assert longer.recommended_nccl_timeout_s > t.recommended_nccl_timeout_s


# --------------------------------------------------------------------------- worker environment

@pytest.mark.parametrize("recipe", ["dapo_sync", "dapo_fullft", "gsm8k_grpo", "dapo_async"])
def test_fla_tilelang_off_on_blackwell_with_kda(point, recipe):
    assert point(f"recipe={recipe}").plan.env["FLA_TILELANG"] == "0"


@pytest.mark.parametrize("overrides", [
    ["recipe=gsm8k_grpo", "cluster=h100x4"],  # Hopper
    ["recipe=gsm8k_grpo", "model=glm5_3_flash_4layer",  # Blackwell, but no KDA layer
     "model.arch.layer_types=[indexed_attention,indexed_attention,indexed_attention,indexed_attention]"],
    ["recipe=tiny_grpo"],  # CPU
])
def test_no_fla_tilelang_elsewhere(point, overrides):
    assert "FLA_TILELANG" not in point(*overrides).plan.env


def test_autotune_results_kept_on_disk_for_kda_on_gpus(point):
    """fla's kernels autotune for minutes per shape: a resumed run must not pay it again."""
    assert point("recipe=gsm8k_grpo", "cluster=h100x4").plan.env["TRITON_CACHE_AUTOTUNING"] == "1"
    assert "TRITON_CACHE_AUTOTUNING" not in point("recipe=tiny_grpo").plan.env  # CPU: no Triton
    assert "TRITON_CACHE_AUTOTUNING" not in point(
        "recipe=gsm8k_grpo", "model=glm5_3_flash_4layer",
        "model.arch.layer_types=[indexed_attention,indexed_attention,indexed_attention,indexed_attention]").plan.env


HOPPER_TP2 = ["recipe=gsm8k_grpo", "cluster=h100x4", "model=glm5_3_flash_4layer", "inference.tp=4", "trainer.mesh.ep=4"]


def test_cuda_device_max_connections_on_hopper_with_megatron_tp(point):
    assert point(*HOPPER_TP2).plan.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    tp1 = point(*HOPPER_TP2, "trainer.mesh.tp=1", "trainer.mesh.sequence_parallel=false").plan.env
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in tp1
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in point("recipe=gsm8k_grpo").plan.env  # Blackwell


def test_cuda_home_forwarded_from_driver(point):
    p = point("recipe=dapo_sync", driver_env={"CUDA_HOME": "/usr/local/cuda-13.0"})
    assert p.plan.env["CUDA_HOME"] == "/usr/local/cuda-13.0"
    assert "driver" in p.plan.origins["env.CUDA_HOME"]
    assert "CUDA_HOME" not in point("recipe=dapo_sync").plan.env


def test_user_env_wins(point):
    p = point("recipe=dapo_sync", "+env.FLA_TILELANG=1", "+env.CUDA_HOME=/opt/cuda", "+env.MY_FLAG=on",
              driver_env={"CUDA_HOME": "/usr/local/cuda"})
    env = p.plan.env
    assert (env["FLA_TILELANG"], env["CUDA_HOME"], env["MY_FLAG"]) == ("1", "/opt/cuda", "on")


# --------------------------------------------------------------------------- plan as data

REQUIRED_KEYS = ["params.total", "params.active", "mesh.dp", "mesh.edp", "mesh.experts_per_gpu",
                 "batch.sequences_per_step", "memory.trainer.weights_gib", "memory.trainer.total_gib",
                 "memory.inference.total_gib", "env"]


def dig(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d[part]
    return d


def test_plan_dict_has_required_keys_and_is_json(point):
    plan = point("recipe=dapo_sync").plan
    d = json.loads(json.dumps(plan.to_dict()))
    for key in REQUIRED_KEYS:
        dig(d, key)
    assert dig(d, "params.total") == 313_326_816_766 and dig(d, "mesh.edp") == 2
    assert isinstance(d["env"], dict) and all(isinstance(v, str) for v in d["env"].values())


def test_derived_values_are_logged_with_their_origin(point):
    origins = point("recipe=dapo_sync").plan.origins
    for key in ("params.total", "mesh.dp", "mesh.edp", "mesh.experts_per_gpu", "batch.sequences_per_step"):
        assert key in origins and " from " in origins[key]
    assert "128" in origins["batch.sequences_per_step"] and "12" in origins["batch.sequences_per_step"]


def test_lora_targets_are_modules_of_the_name_table():
    """The planner's LoRA targets (layer kind, TP sharding) name the same Megatron modules as
    model/names.py, and each sits in the layer kind whose table holds it."""
    from launcher.plan.arch import DSA, KDA
    from launcher.plan.lora import ATTENTION_TARGETS, MLP_TARGETS
    from model.names import ATTENTION_MODULES, KDA_TABLE, MLA_TABLE, MLP_PROJECTIONS

    assert set(ATTENTION_TARGETS) <= set(ATTENTION_MODULES) and set(MLP_TARGETS) == set(MLP_PROJECTIONS)
    in_table = {DSA: {m.split(".")[1] for m, _, _ in MLA_TABLE}, KDA: {m.split(".")[1] for m, _, _ in KDA_TABLE}}
    assert all(name in in_table[kind] for name, (kind, _) in ATTENTION_TARGETS.items())


def test_colocated_hf_engines_on_gpus_get_expandable_segments(point):
    """Engine and trainer processes share each GPU: what one caches the other cannot use. vLLM's
    sleep mode refuses expandable segments, so its engines never get them; nor do CPU runs."""
    hf = point("recipe=tiny_grpo_chat", "model=glm5_3_flash_4layer", "cluster=h200x1", "inference.engines=1",
               "trainer.backend=megatron", "trainer.lora.rank=16").plan
    assert hf.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "colocated hf engine" in hf.origins["env.PYTORCH_CUDA_ALLOC_CONF"]
    assert "PYTORCH_CUDA_ALLOC_CONF" not in point("recipe=gsm8k_grpo").plan.env  # vLLM engines
    assert "PYTORCH_CUDA_ALLOC_CONF" not in point("recipe=tiny_grpo_chat").plan.env  # CPU


def test_gpu_megatron_trainers_cap_inductors_compile_workers(point, monkeypatch):
    """Unset, inductor starts a compile worker per core in every trainer process; the plan caps
    them, torch reads the cap (the function its config calls at import), and host memory counts them."""
    from torch._inductor.config import decide_compile_threads

    from launcher.plan.env import TRAINER_COMPILE_THREADS
    from launcher.plan.memory import INDUCTOR_WORKER_GIB

    slice4 = ("recipe=tiny_grpo_chat", "model=glm5_3_flash_4layer", "cluster=h200x1", "inference.engines=1",
              "trainer.backend=megatron")
    gpu = point(*slice4).plan
    assert gpu.env["TORCHINDUCTOR_COMPILE_THREADS"] == str(TRAINER_COMPILE_THREADS)
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", gpu.env["TORCHINDUCTOR_COMPILE_THREADS"])
    assert decide_compile_threads() == TRAINER_COMPILE_THREADS
    hf_trainer = point(*slice4, "trainer.backend=hf").plan
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in hf_trainer.env
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in point("recipe=tiny_grpo_chat", "trainer.backend=megatron").plan.env
    assert gpu.memory.host.processes_gib - hf_trainer.memory.host.processes_gib == pytest.approx(
        TRAINER_COMPILE_THREADS * INDUCTOR_WORKER_GIB)
    host = gpu.memory.host
    assert host.total_per_node_gib == pytest.approx(host.sleeping_engine_weights_gib + host.offloaded_trainer_gib
                                                    + host.optimizer_offload_gib + host.processes_gib)


def test_a_colocated_step_prices_the_swap(point):
    """The slice's steady steps spent 3.9-5.5 s of rollout outside generation on the H200: the
    Megatron trainer's 47.7 GiB off the GPU and back through pinned buffers, and the hf engine's
    wake and sleep."""
    from launcher.plan.swap import HF_ENGINE_SWAP_S, PINNED_OFFLOAD_GIB_PER_S

    plan = point("recipe=tiny_grpo_chat", "model=glm5_3_flash_4layer", "cluster=h200x1", "inference.engines=1",
                 "trainer.backend=megatron", "model.dtype=bfloat16", "trainer.lora.rank=16").plan
    offloaded = plan.memory.host.offloaded_trainer_gib
    assert plan.timing.swap_s == pytest.approx(2 * offloaded / PINNED_OFFLOAD_GIB_PER_S + HF_ENGINE_SWAP_S)
    assert 3.5 < plan.timing.swap_s < 5.5
    assert "timing.swap_s" in plan.origins
    assert point("recipe=dapo_async").plan.timing.swap_s == 0.0
