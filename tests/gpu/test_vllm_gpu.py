"""The vllm backend's GPU-only paths (skipped without CUDA and the CUDA build of vllm):
sleep levels 1 and 2, CUDA-IPC weight transfer (colocated), NCCL weight transfer (async,
needs 2 GPUs), and GLM-5.3-Flash engines (vLLM's own model, GPU kernels) with merged and
adapter sync. Not run on the CPU machines; see README "Not run here".

    PYTHONPATH=. python -m pytest tests/gpu/test_vllm_gpu.py -m gpu -q
"""
import socket

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm", reason="vllm (CUDA build) not installed")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PROMPT = [5, 6, 7, 8, 9]
# bf16 engines vs the bf16 HF model: different kernels and reduction orders; 0.1 nats per
# token bounds what a correct sync gives, a wrong or missing sync is off by > 1 nat.
BF16_LOGP_TOL = 0.1


def _point(*overrides):
    from launcher.compose import compose
    from launcher.plan import make_plan

    cfg = compose(["cluster=h200x1", "model.dtype=bfloat16", "inference.gpu_memory_utilization=0.25",
                   *overrides]).config
    return cfg, make_plan(cfg, driver_env={})


def _hf_model(cfg, seed=3):
    from launcher.backends.hf._model import build_model

    return build_model(cfg.model, 0, seed).cuda().eval()


def _push_buckets(engine, model, max_bytes=1 << 20):
    from launcher.backends.hf._model import language_state
    from launcher.backends.vllm._buckets import buckets

    engine.begin_weight_update()
    for bucket in buckets(language_state(model).items(), max_bytes):
        engine.load_weight_bucket(bucket)
    engine.finish_weight_update(engine.version + 1)


def _hf_logprobs(model, prompt, tokens, temperature):
    ids = torch.tensor([prompt + tokens], device="cuda")
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    logp = torch.log_softmax(logits[0, len(prompt) - 1:-1] / temperature, -1)
    return logp.gather(-1, ids[0, len(prompt):, None]).squeeze(-1).cpu()


def _engine(cfg, plan, engine_index=0):
    from launcher.backends.vllm._engine import VllmEngine

    return VllmEngine(cfg, plan, eos_id=1, pad_id=0, seed=0, engine_index=engine_index)


def _assert_engine_matches(engine, model, cfg):
    gen = engine.generate([PROMPT], seed=11)[0]
    hf = _hf_logprobs(model, PROMPT, gen.tokens, cfg.algorithm.temperature)
    assert (hf - torch.tensor(gen.logprobs)).abs().max().item() < BF16_LOGP_TOL


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_frees_the_gpu_and_wake_restores_the_synced_model(level):
    cfg, plan = _point("recipe=tiny_qwen3_vllm", f"inference.sleep_level={level}")
    model = _hf_model(cfg)
    engine = _engine(cfg, plan)
    _push_buckets(engine, model)
    before = engine.generate([PROMPT] * 4, seed=5)
    free_awake = torch.cuda.mem_get_info()[0]
    engine.sleep()
    freed_gib = (torch.cuda.mem_get_info()[0] - free_awake) / 2**30
    # The KV cache is most of the 25% budget; both levels drop it.
    assert freed_gib > 0.5 * cfg.inference.gpu_memory_utilization * cfg.cluster.gpu.memory_gib
    if level == 2:
        _push_buckets(engine, model)  # level 2 discarded the weights: the trainer resends them
    engine.wake()
    after = engine.generate([PROMPT] * 4, seed=5)
    assert [g.tokens for g in after] == [g.tokens for g in before]


def test_ipc_transfer_colocated_updates_the_engine():
    import ray
    from vllm.distributed.weight_transfer.base import ModuleSource

    from launcher.backends.vllm._engine import VllmEngine
    from launcher.backends.vllm._transfer import trainer_sender

    cfg, plan = _point("recipe=tiny_qwen3_vllm", "inference.sleep_level=1")
    ray.init(num_gpus=1, include_dashboard=False, ignore_reinit_error=True)
    try:
        # CUDA IPC needs another process on the same GPU: the engine is a Ray actor.
        actor = ray.remote(num_gpus=0.5)(VllmEngine).remote(cfg, plan, eos_id=1, pad_id=0, seed=0)
        model = _hf_model(cfg)
        sender = trainer_sender(cfg, [actor], ModuleSource(model), rank=0)
        sender.send_weights()
        gen = ray.get(actor.generate.remote([PROMPT], 11))[0]
        hf = _hf_logprobs(model, PROMPT, gen.tokens, cfg.algorithm.temperature)
        assert (hf - torch.tensor(gen.logprobs)).abs().max().item() < BF16_LOGP_TOL
        with torch.no_grad():  # a second round carries the change
            model.lm_head.weight.mul_(2.0)
        sender.send_weights()
        gen2 = ray.get(actor.generate.remote([PROMPT], 11))[0]
        hf2 = _hf_logprobs(model, PROMPT, gen2.tokens, cfg.algorithm.temperature)
        assert (hf2 - torch.tensor(gen2.logprobs)).abs().max().item() < BF16_LOGP_TOL
    finally:
        ray.shutdown()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs the trainer and the engine on different GPUs")
def test_nccl_transfer_async_updates_the_engine():
    import ray
    from vllm.distributed.weight_transfer.base import ModuleSource

    from launcher.backends.vllm._engine import VllmEngine
    from launcher.backends.vllm._transfer import trainer_sender

    cfg, plan = _point("recipe=tiny_qwen3_vllm", "placement.mode=async", "inference.sleep_level=0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_gpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        actor = ray.remote(num_gpus=1)(VllmEngine).remote(cfg, plan, eos_id=1, pad_id=0, seed=0)
        ray.get(actor.generate.remote([PROMPT], 0))  # engine up (placed on the GPU Ray gave it)
        torch.cuda.set_device(0)
        model = _hf_model(cfg)
        sender = trainer_sender(cfg, [actor], ModuleSource(model), rank=0,
                                master_address="127.0.0.1", master_port=port)
        sender.send_weights()
        gen = ray.get(actor.generate.remote([PROMPT], 11))[0]
        hf = _hf_logprobs(model, PROMPT, gen.tokens, cfg.algorithm.temperature)
        assert (hf - torch.tensor(gen.logprobs)).abs().max().item() < BF16_LOGP_TOL
    finally:
        ray.shutdown()


def test_glm5_flash_engine_takes_bucketed_merged_weights():
    """vLLM's own GLM-5.3-Flash model (KDA, DSA, mHC, MoE kernels) loads HF-named buckets."""
    cfg, plan = _point("recipe=tiny_grpo", "inference.backend=vllm", "inference.sleep_level=1",
                       "inference.max_model_len=256")
    model = _hf_model(cfg)
    engine = _engine(cfg, plan)
    _push_buckets(engine, model)
    _assert_engine_matches(engine, model, cfg)


def test_glm5_flash_adapter_sync_with_experts_among_targets(tmp_path):
    """Adapter sync: vLLM needs `experts` among its LoRA targets on the MoE model, or it
    fails with "LoRA context must be set" (DOMAIN.md section 4)."""
    from peft import LoraConfig, get_peft_model

    cfg, plan = _point("recipe=tiny_grpo", "inference.backend=vllm", "inference.sleep_level=1",
                       "inference.max_model_len=256", "trainer.lora.rank=8", "trainer.lora.merge=false",
                       "inference.lora_targets=[q_proj,k_proj,v_proj,o_proj,experts]")
    model = _hf_model(cfg)
    engine = _engine(cfg, plan)
    _push_buckets(engine, model)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                  init_lora_weights=False))
    peft_model.save_pretrained(tmp_path)
    engine.load_adapter(str(tmp_path), version=1)
    _assert_engine_matches(engine, peft_model, cfg)
