"""The vllm backend's GPU-only paths (skipped without CUDA and the CUDA build of vllm):
sleep levels 1 and 2, CUDA-IPC weight transfer (colocated), NCCL weight transfer (async,
needs 2 GPUs), and GLM-5.3-Flash engines (vLLM's own model, GPU kernels) with merged and
adapter sync. Not run on the CPU machines; see docs/guide_details.md "Not run here".

    PYTHONPATH=. python -m pytest tests/gpu/test_vllm_gpu.py -m gpu -q
"""
import socket

import pytest

from launcher.contract.spec import ActorSpec
from launcher.weight_sync.messages import EngineWait

torch = pytest.importorskip("torch")
pytest.importorskip("vllm", reason="vllm (CUDA build) not installed")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PROMPT = [5, 6, 7, 8, 9]
# bf16 engines vs the bf16 HF model: different kernels and reduction orders; 0.1 nats per
# token bounds what a correct sync gives, a wrong or missing sync is off by > 1 nat.
BF16_LOGP_TOL = 0.1


def _config(*overrides):
    from launcher.config.compose import compose

    return compose(["cluster=h200x1", "model.dtype=bfloat16", "inference.gpu_memory_utilization=0.25",
                    *overrides]).config


def _hf_model(cfg, seed=3):
    from launcher.workers.hf.model import build_model

    return build_model(cfg.model, 0, seed).cuda().eval()


WAIT = EngineWait(["engine 0"], 600.0, "test")
"""Each transfer step's bound on the engine (the driver derives it in a run)."""
SMALL_BUCKET_BYTES = 4 << 20  # several buckets even for the tiny models: layers arrive split


def _stream(engine, update, named):
    """A streamed update through the Protocol: begin, bucket after bucket, finish."""
    from launcher.weight_sync.export import buckets

    engine.begin_weight_update(update)
    for bucket in buckets(named, SMALL_BUCKET_BYTES):
        engine.load_weight_bucket(bucket)
    engine.finish_weight_update(update.version)


def _sync(engine, model, version=1):
    """Merged weights, streamed into the engine in buckets."""
    from launcher.weight_sync.messages import WeightUpdate
    from launcher.workers.hf.model import language_items

    _stream(engine, WeightUpdate(version=version), (("weights", n, t) for n, t in language_items(model)))


def _request(n=1, seed=11):
    from launcher.contract.messages import GenerationRequest, SamplingParams

    return GenerationRequest(prompts=[PROMPT] * n, seed=seed, sampling=SamplingParams(max_tokens=16))


def _hf_logprobs(model, prompt, tokens, temperature):
    ids = torch.tensor([prompt + tokens], device="cuda")
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    logp = torch.log_softmax(logits[0, len(prompt) - 1:-1] / temperature, -1)
    return logp.gather(-1, ids[0, len(prompt):, None]).squeeze(-1).cpu()


def _assert_matches(generation, model):
    hf = _hf_logprobs(model, PROMPT, generation.tokens[0], temperature=1.0)
    assert (hf - torch.tensor(generation.logprobs[0])).abs().max().item() < BF16_LOGP_TOL


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_frees_the_gpu_and_wake_restores_the_synced_model(level):
    from launcher.workers.vllm import VllmInference

    cfg = _config("recipe=tiny_qwen3_vllm", f"inference.sleep_level={level}")
    model = _hf_model(cfg)
    engine = VllmInference(ActorSpec.planned(cfg, 0))
    _sync(engine, model)
    before = engine.generate(_request(4, seed=5))
    free_awake = torch.cuda.mem_get_info()[0]
    engine.sleep(level)
    freed_gib = (torch.cuda.mem_get_info()[0] - free_awake) / 2**30
    # The KV cache is most of the 25% budget; both levels drop it.
    assert freed_gib > 0.5 * cfg.inference.gpu_memory_utilization * cfg.cluster.gpu.memory_gib
    with pytest.raises(RuntimeError, match="asleep"):
        engine.generate(_request())
    if level == 2:
        _sync(engine, model, version=2)  # level 2 discarded the weights: the trainer resends them
    engine.wake()
    after = engine.generate(_request(4, seed=5))
    assert after.tokens == before.tokens


def test_ipc_transfer_colocated_updates_the_engine():
    import ray
    from vllm.distributed.weight_transfer.base import ModuleSource

    from launcher.plan.sync import SyncTransport
    from launcher.weight_sync.transports import transport_for
    from launcher.workers.vllm import VllmInference

    cfg = _config("recipe=tiny_qwen3_vllm", "inference.sleep_level=1")
    ray.init(num_gpus=1, include_dashboard=False, ignore_reinit_error=True)
    try:
        # CUDA IPC needs another process on the same GPU: the engine is a Ray actor.
        actor = ray.remote(num_gpus=0.5)(VllmInference).remote(ActorSpec.planned(cfg))
        model = _hf_model(cfg)
        ipc = transport_for(SyncTransport.vllm_ipc)
        sender = ipc.trainer_sender(cfg, [actor], ModuleSource(model), rank=0, wait=WAIT)
        sender.send_weights()
        _assert_matches(ray.get(actor.generate.remote(_request())), model)
        with torch.no_grad():  # a second round carries the change
            model.lm_head.weight.mul_(2.0)
        sender.send_weights()
        _assert_matches(ray.get(actor.generate.remote(_request())), model)
    finally:
        ray.shutdown()


def test_loop_path_trainer_pushes_over_ipc_when_the_plan_says_so():
    """What weight_sync.push.sync_weights does with GPU engines: the plan's transport is
    vllm_ipc, the engine starts with vLLM's "ipc" transfer, the trainer backend connects
    (StreamedExport.connect_weight_transfer) and pushes its merged weights with the policy
    version (send_weights)."""
    import ray

    from launcher.workers.hf import HfTrainer
    from launcher.workers.vllm import VllmInference

    cfg = _config("recipe=tiny_qwen3_vllm", "inference.sleep_level=1")
    assert ActorSpec.planned(cfg).plan.sync.transport == "vllm_ipc"
    ray.init(num_gpus=1, include_dashboard=False, ignore_reinit_error=True)
    try:
        actor = ray.remote(num_gpus=0.5)(VllmInference).remote(ActorSpec.planned(cfg))
        trainer = HfTrainer(ActorSpec.planned(cfg, 0, 1))
        trainer.connect_weight_transfer([actor], None, None, WAIT)
        for version in (1, 2):
            trainer.send_weights(version, WAIT)
            generation = ray.get(actor.generate.remote(_request()))
            assert generation.policy_version == version
            _assert_matches(generation, trainer.model.eval())
            with torch.no_grad():
                trainer.model.lm_head.weight.mul_(2.0)
    finally:
        ray.shutdown()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs the trainer and the engine on different GPUs")
def test_nccl_transfer_async_updates_the_engine():
    import ray
    from vllm.distributed.weight_transfer.base import ModuleSource

    from launcher.plan.sync import SyncTransport
    from launcher.weight_sync.transports import transport_for
    from launcher.workers.vllm import VllmInference

    cfg = _config("recipe=tiny_qwen3_vllm", "placement.mode=async", "inference.sleep_level=0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_gpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        actor = ray.remote(num_gpus=1)(VllmInference).remote(ActorSpec.planned(cfg))
        ray.get(actor.pid.remote())  # engine up, on the GPU Ray gave it
        torch.cuda.set_device(0)
        model = _hf_model(cfg)
        nccl = transport_for(SyncTransport.vllm_nccl)
        sender = nccl.trainer_sender(cfg, [actor], ModuleSource(model), rank=0, wait=WAIT,
                                     master_address="127.0.0.1", master_port=port)
        sender.send_weights()
        _assert_matches(ray.get(actor.generate.remote(_request())), model)
    finally:
        ray.shutdown()


def test_glm5_flash_engine_takes_bucketed_merged_weights():
    """vLLM's own GLM-5.3-Flash model (KDA, DSA, mHC, MoE kernels) loads HF-named buckets."""
    from launcher.workers.vllm import VllmInference

    cfg = _config("recipe=tiny_grpo", "inference.backend=vllm", "inference.engines=1", "inference.sleep_level=1",
                  "inference.max_model_len=256")
    model = _hf_model(cfg)
    engine = VllmInference(ActorSpec.planned(cfg, 0))
    _sync(engine, model)
    _assert_matches(engine.generate(_request()), model)


def test_glm5_flash_adapter_sync_with_experts_among_targets():
    """Adapter sync: vLLM needs `experts` among its LoRA targets on the MoE model, or it
    fails with "LoRA context must be set" (docs/model.md section 4)."""
    from launcher.plan.lora import peft_kwargs
    from launcher.weight_sync.messages import WeightUpdate
    from launcher.workers.hf.lora import adapter_state, merged_items, wrap
    from launcher.workers.hf.model import VISION_PREFIX
    from launcher.workers.vllm import VllmInference

    cfg = _config("recipe=tiny_grpo", "inference.backend=vllm", "inference.engines=1", "inference.sleep_level=1",
                  "inference.max_model_len=256", "trainer.lora.rank=8", "trainer.lora.merge=false",
                  "trainer.lora.targets=[linear_proj,q_proj,v_proj]",
                  "inference.lora_targets=[o_proj,q_proj,v_proj,experts]")
    model = _hf_model(cfg)
    engine = VllmInference(ActorSpec.planned(cfg, 0))
    kwargs = peft_kwargs(cfg.trainer.lora)
    peft_model = wrap(model, dict(kwargs, init_lora_weights=False)).eval()
    # What the hf trainer sends on the first adapter sync: the frozen base, then the adapter.
    named = [("weights", n, t) for n, t in merged_items(peft_model, VISION_PREFIX, with_delta=False)]
    named += [("adapter", n, t) for n, t in adapter_state(peft_model).items()]
    _stream(engine, WeightUpdate(version=1, adapter=kwargs, with_base=True), named)
    _assert_matches(engine.generate(_request()), peft_model)
