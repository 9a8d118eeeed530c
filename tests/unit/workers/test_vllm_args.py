"""The vllm backend's pure parts: engine arguments from config + plan, rank offsets, the transfer client.

These run in the project's main venv (no vllm import): what an engine starts with must be
what `plan` printed, on CPU and on GPU clusters alike.
"""
import pytest

from launcher.weight_sync.messages import EngineWait
from launcher.weight_sync.transports.vllm_engine import EngineGroupClient, engine_rank_offset
from launcher.workers.vllm.args import engine_kwargs, ray_executor_env, vllm_lora_rank


def _kwargs(point, *overrides, on_cpu=False):
    p = point(*overrides)
    return engine_kwargs(p.cfg, p.plan, "/models/x", on_cpu=on_cpu, seed=7)


def test_cpu_engine_gets_the_planned_cache_in_bytes_and_no_sleep(point):
    kw = _kwargs(point, "recipe=tiny_qwen3_vllm", on_cpu=True)
    inf = point("recipe=tiny_qwen3_vllm").cfg.inference
    assert (kw["max_num_seqs"], kw["max_model_len"]) == (inf.max_num_seqs, inf.max_model_len)
    # vLLM's CPU backend reads gpu_memory_utilization as a share of all host RAM.
    assert "gpu_memory_utilization" not in kw and kw["kv_cache_memory_bytes"] >= 32 << 20
    assert "enable_sleep_mode" not in kw and "weight_transfer_config" not in kw
    assert kw["load_format"] == "dummy" and kw["skip_tokenizer_init"] is True
    assert kw["logprobs_mode"] == "processed_logprobs" and kw["dtype"] == "float32"


def test_colocated_gpu_engine_sleeps_and_takes_ipc_transfers(point):
    kw = _kwargs(point, "recipe=dapo_fullft")
    p = point("recipe=dapo_fullft")
    assert kw["gpu_memory_utilization"] == p.cfg.inference.gpu_memory_utilization
    assert kw["enable_sleep_mode"] is (p.cfg.placement.mode.value == "colocated" and p.plan.memory.sleep_level > 0)
    backend = "ipc" if p.cfg.placement.mode.value == "colocated" else "nccl"
    assert kw["weight_transfer_config"] == {"backend": backend}
    assert kw["tensor_parallel_size"] == p.cfg.inference.tp


def test_async_engine_takes_nccl_transfers_and_never_sleeps(point):
    kw = _kwargs(point, "recipe=dapo_async")
    assert kw["weight_transfer_config"] == {"backend": "nccl"} and kw["enable_sleep_mode"] is False


def test_adapter_sync_starts_lora_with_the_recipe_targets(point):
    kw = _kwargs(point, "recipe=dapo_sync")
    assert kw["enable_lora"] is True and kw["max_lora_rank"] == 64
    assert "experts" in kw["lora_target_modules"]
    assert kw["enable_expert_parallel"] is (point("recipe=dapo_sync").cfg.inference.ep > 1)
    assert "weight_transfer_config" not in kw  # adapters travel as a folder, not as merged weights


def test_expert_parallel_follows_inference_ep(point):
    assert _kwargs(point, "recipe=dapo_sync", "inference.ep=8")["enable_expert_parallel"] is True
    assert _kwargs(point, "recipe=dapo_sync", "inference.ep=1")["enable_expert_parallel"] is False


@pytest.mark.parametrize(("rank", "allowed"), [(1, 1), (4, 8), (64, 64), (300, 320), (512, 512)])
def test_lora_rank_rounds_up_to_a_vllm_rank(rank, allowed):
    assert vllm_lora_rank(rank) == allowed


def test_lora_rank_above_vllm_maximum_is_an_error():
    with pytest.raises(ValueError, match="512"):
        vllm_lora_rank(1024)


def test_transfer_client_announces_the_policy_version_at_finish(monkeypatch):
    client = EngineGroupClient(engines=[], wait=EngineWait([], 60.0, "test"))
    calls = []
    monkeypatch.setattr(client, "_all", lambda method, *args: calls.append((method, *args)))
    client.version = 5  # what StreamedExport.send_weights sets: vLLM's senders finish without a version
    client.finish_weight_update()
    client.finish_weight_update("6")
    assert calls == [("transfer_finish", "5"), ("transfer_finish", "6")]


def test_each_engine_shifts_its_nccl_ranks_past_the_engines_before_it():
    assert engine_rank_offset({"rank_offset": 1, "world_size": 17}, engine_index=1, tp=8)["rank_offset"] == 9
    assert engine_rank_offset({"packed": True}, engine_index=1, tp=8) == {"packed": True}


def test_tp_engines_place_their_ray_workers_on_their_own_gpus(point):
    p = point("recipe=dapo_sync")  # colocated, 2 engines x tp 8 on 2 nodes of 8 GPUs
    assert _kwargs(point, "recipe=dapo_sync")["distributed_executor_backend"] == "ray"
    env = ray_executor_env(p.cfg, p.plan, engine_index=1)
    assert env["VLLM_RAY_BUNDLE_INDICES"] == ",".join(str(s.gpu) for s in p.plan.placement.engine_slots[1])
    assert len(env["VLLM_RAY_BUNDLE_INDICES"].split(",")) == p.cfg.inference.tp
    assert float(env["VLLM_RAY_PER_WORKER_GPUS"]) == 0.5  # the other half is the colocated trainer rank's
    tiny = point("recipe=tiny_qwen3_vllm")
    assert ray_executor_env(tiny.cfg, tiny.plan, 0) == {}


def test_language_model_only_reaches_the_engine_when_the_config_says_so(point):
    # GLM-5.3-Flash is a VL class: without it vLLM builds a multimodal processor that
    # refuses to run with skip_tokenizer_init.
    assert _kwargs(point, "recipe=dapo_fullft")["language_model_only"] is True
    assert _kwargs(point, "recipe=tiny_qwen3_vllm", on_cpu=True)["language_model_only"] is True
    assert "language_model_only" not in _kwargs(point, "recipe=dapo_fullft", "model.language_model_only=false")


def test_optional_engine_args_are_dropped_only_where_vllm_lacks_them():
    from launcher.workers.vllm.args import supported_kwargs

    kw = {"model": "/m", "language_model_only": True}
    assert supported_kwargs(kw, ["model", "language_model_only"]) == (kw, [])
    assert supported_kwargs(kw, ["model"]) == ({"model": "/m"}, ["language_model_only"])
    # A core argument is never dropped: LLM(...) must reject it loudly.
    assert supported_kwargs({"bogus": 1}, ["model"]) == ({"bogus": 1}, [])


@pytest.mark.parametrize("key", ["routing_replay", "routing_agreement"])
def test_route_capture_and_its_prefix_caching_only_when_routes_are_wanted(point, key):
    """vLLM returns routes only with enable_return_routed_experts and prefix caching on; 0.32
    captures them in Model Runner V2 only (config/vllm.py _verify_aux_output_compatibility),
    0.26 in V1 only (V2 lists the capture as unsupported); the validator lets such a GPU run
    through (ROUTE002 refuses CPU only)."""
    from launcher.vllm_release import RELEASES
    from launcher.workers.vllm.args import routes_env

    on = point("recipe=dapo_sync", f"algorithm.{key}=true")
    kw = _kwargs(point, "recipe=dapo_sync", f"algorithm.{key}=true")
    assert kw["enable_return_routed_experts"] is True and kw["enable_prefix_caching"] is True
    assert routes_env(on.cfg, RELEASES["0.32"]) == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    assert routes_env(on.cfg, RELEASES["0.26"]) == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    assert [f for f in on.of("ROUTE002") if f.key == "inference.backend"] == []
    off = point("recipe=dapo_sync")
    kw_off = _kwargs(point, "recipe=dapo_sync")
    assert "enable_return_routed_experts" not in kw_off and "enable_prefix_caching" not in kw_off
    assert routes_env(off.cfg, RELEASES["0.32"]) == {}


def test_fp8_engines_ask_vllm_for_online_block_quantization(point):
    """inference.weights_dtype=fp8: vLLM quantizes each layer as it loads and on every reload;
    bf16 engines ask for nothing."""
    assert _kwargs(point, "recipe=dapo_sync", "inference.weights_dtype=fp8")["quantization"] == "fp8_per_block"
    assert "quantization" not in _kwargs(point, "recipe=dapo_sync")
