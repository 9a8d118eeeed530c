"""docs/model.md section 5, incidents from real runs: each broken config people actually ran (or the
fix they applied), in that section's order. The validator must reject the broken form before Ray
starts, with the values in the message, and accept the fix. Re-planning onto fewer nodes (incident
10) is tests/unit/plan/test_replan.py.
"""
import pytest

DAPO_3_NODES = ("recipe=dapo_sync", "cluster=b300x3", "inference.engines=3")


def test_full_finetuning_does_not_fit_one_b300_node(point):
    # the GSM8K recipe as full fine-tuning on 8 x B300
    p = point("recipe=gsm8k_grpo", "trainer.lora.rank=0", "trainer.lora.targets=[]")
    (finding,) = p.of("MEM006")
    assert finding.severity == "error" and finding.key == "trainer.lora.rank"
    assert "5.13 TiB" in finding.message and "8 x B300 hold 2.10 TiB" in finding.message
    assert "LoRA" in finding.fix
    # the shipped full-FT recipe moved to the same cluster is rejected too
    assert "MEM006" in point("recipe=dapo_fullft", "cluster=b300x1").ids
    # ... and on 64 x B200 with TP4 EP32 ETP2 it is accepted with no error at all
    fullft = point("recipe=dapo_fullft")
    assert fullft.errors == []
    assert (fullft.plan.mesh.tp, fullft.plan.mesh.ep, fullft.plan.mesh.etp, fullft.plan.mesh.trainer_gpus) == (4, 32, 2, 64)
    # and the LoRA recipe on the one node is fine
    assert point("recipe=gsm8k_grpo").errors == []


@pytest.mark.parametrize("override, rule", [
    ("trainer.mesh.pp=3", "MESH002"),
    ("trainer.mesh.cp=2", "MESH003"),
    ("trainer.recompute.granularity=full", "RECOMP001"),
    ("trainer.recompute.modules=[core_attn,mhc]", "RECOMP002"),
    ("trainer.use_fused_mhc=true", "MHC001"),
])
def test_mhc_and_kda_limits_rejected_before_model_build(point, override, rule):
    (finding,) = point("recipe=dapo_sync", override).of(rule)
    assert finding.severity == "error"


def test_mhc_and_kda_limits_all_reported_in_one_round(point):
    p = point("recipe=dapo_sync", "trainer.mesh.pp=3", "trainer.mesh.cp=2", "trainer.recompute.granularity=full",
              "trainer.use_fused_mhc=true")
    assert {"MESH002", "MESH003", "RECOMP001", "MHC001"} <= {f.id for f in p.errors}


def test_mini_batch_times_samples_must_divide_dp(point):
    # 3 nodes: DP 12; 32 prompts x 8 samples = 256 does not divide, the recipe moved to 12 samples
    (finding,) = point(*DAPO_3_NODES, "algorithm.samples_per_prompt=8").of("BATCH001")
    assert "= 256" in finding.message and "dp 12" in finding.message and "12" in finding.fix
    fixed = point(*DAPO_3_NODES)
    assert fixed.errors == [] and fixed.plan.mesh.dp == 12


def test_microbatch_must_hold_one_full_sequence(point):
    # async DAPO: 2048 prompt + 4096 response; 4096 tokens per micro-batch was too small
    (finding,) = point("recipe=dapo_async", "trainer.max_tokens_per_microbatch=4096").of("SEQ002")
    assert "max_tokens_per_microbatch=4096" in finding.message and "6144 tokens" in finding.message
    assert "6144" in finding.fix
    assert point("recipe=dapo_async").of("SEQ002") == []  # the recipe's 8192 holds it
    (finding,) = point("recipe=dapo_sync", "trainer.max_tokens_per_microbatch=8192").of("SEQ002")
    assert "10240 tokens" in finding.message  # upstream's 8192 cannot hold 2048 + 8192


def test_long_sequences_need_a_kpool_indexer(point):
    (finding,) = point("recipe=dapo_sync", "model.arch.index_kpool=1").of("SEQ003")
    assert "10240 tokens" in finding.message and "index_topk=2048" in finding.message
    assert point("recipe=dapo_sync", "model.arch.index_kpool=4").of("SEQ003") == []
    # sequences within index_topk train without pooling (GSM8K: 512 + 1024)
    assert point("recipe=gsm8k_grpo", "model.arch.index_kpool=1").of("SEQ003") == []


def test_router_queue_must_exceed_the_fan_out(point):
    # 512 requests per engine x 3 engines released 1536 at once
    (finding,) = point(*DAPO_3_NODES, "inference.concurrency_per_engine=512",
                       "inference.router.queue_size=1024").of("INF006")
    assert "512 x 3 engines = 1536" in finding.message and "> 1536" in finding.fix
    # a queue of 100 with a 60 s timeout drops requests
    small = point("recipe=dapo_sync", "inference.router.queue_size=100", "inference.router.queue_timeout_s=60")
    assert {"INF006", "INF007"} <= small.ids
    # throttled to 128 per engine with queue 8192 and timeout 1800: accepted
    assert not {"INF006", "INF007"} & point(*DAPO_3_NODES).ids


def test_nccl_timeout_follows_the_longest_wait(point):
    (finding,) = point("recipe=dapo_sync", "trainer.nccl_timeout_s=600").of("RUN001")
    timing = point("recipe=dapo_sync").plan.timing
    assert finding.severity == "error" and "nccl_timeout_s=600" in finding.message
    assert f"nccl_timeout_s={timing.recommended_nccl_timeout_s}" in finding.fix
    assert timing.recommended_nccl_timeout_s <= 10920  # the recipe's 10920 s (4 rounds of dynamic sampling) is enough ...
    assert point("recipe=dapo_sync").of("RUN001") == []
    # ... and the recommendation is not a constant: a short GSM8K step needs far less
    assert point("recipe=gsm8k_grpo").plan.timing.recommended_nccl_timeout_s < timing.recommended_nccl_timeout_s


def test_cuda_home_reaches_every_worker(point):
    p = point("recipe=dapo_sync", driver_env={"CUDA_HOME": "/usr/local/cuda-13.0", "PATH": "/usr/bin"})
    assert p.plan.env["CUDA_HOME"] == "/usr/local/cuda-13.0"
    assert "PATH" not in p.plan.env  # only what workers need, not the whole driver environment


def test_fla_tilelang_off_on_blackwell(point):
    for recipe in ("gsm8k_grpo", "dapo_sync", "dapo_async", "dapo_fullft"):
        assert point(f"recipe={recipe}").plan.env["FLA_TILELANG"] == "0"
    assert "FLA_TILELANG" not in point("recipe=gsm8k_grpo", "cluster=h100x4").plan.env


def test_overlong_penalty_must_start_above_the_mean_response(point):
    # cap 4096, buffer 2048: the penalty started at 2048 while responses averaged 2440
    (finding,) = point("recipe=dapo_async", "algorithm.overlong.buffer_len=2048",
                       "algorithm.overlong.expected_response_len=2440").of("ALGO003")
    assert finding.severity == "warning" and "starts at 2048" in finding.message and "2440" in finding.message
    assert "buffer_len <= 1656" in finding.fix
    # buffer 1024 (the recipe's fix) starts at 3072
    assert point("recipe=dapo_async", "algorithm.overlong.expected_response_len=2440").of("ALGO003") == []
    assert point("recipe=dapo_async").of("ALGO003") == []


def test_normalized_moe_lora_rank_must_divide_top_k(point):
    (finding,) = point("recipe=gsm8k_grpo", "trainer.lora.normalize_moe_lora=true", "trainer.lora.rank=12").of("LORA001")
    assert "rank=12" in finding.message and "num_experts_per_tok=8" in finding.message
    ok = point("recipe=dapo_sync")
    assert ok.of("LORA001") == [] and ok.plan.lora.expert_rank == 8  # 64 / top-8


def test_small_card_leaves_room_for_the_sampler(point):
    small = ("recipe=tiny_grpo", "cluster=h200x1", "cluster.gpu.memory_gib=22", "inference.engines=1")
    (finding,) = point(*small, "inference.gpu_memory_utilization=0.9").of("INF005")
    assert "gpu_memory_utilization=0.9" in finding.message and "2.2 GiB of 22 GiB" in finding.message
    assert point(*small).of("INF005") == []  # 0.7 leaves 6.6 GiB
