"""Expert LoRA on the hf backends (issue 41): the hf trainer adapts the routed experts' fused
parameters through peft's target_parameters, sends them per expert under the names the
Megatron trainer uses, and merged sync, adapter sync and an exported PEFT folder all give
the trainer's log-probs."""
import pytest

from launcher.contract.messages import GenerationRequest, SamplingParams, TrainShard
from launcher.contract.spec import ActorSpec
from launcher.weight_sync.pump import sync_in_process
from launcher.workers import engine_class, trainer_class
from tests.shared_compose import compose_shipped

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow

PROMPTS = [[5, 6, 7]] * 4 + [[8, 9]] * 4
EXPERTS = ["trainer.lora.rank=4", "trainer.lora.alpha=8",
           "trainer.lora.targets=[linear_proj,linear_fc1,linear_fc2,q_proj,k_proj,v_proj,o_proj]"]
TOL = 1e-4
"""fp32 on one CPU: the same weights through peft's forward, a merged weight or another wrapper."""


def _config(*overrides):
    return compose_shipped(["recipe=tiny_grpo", "algorithm.max_response_len=3", *EXPERTS, *overrides]).config


def _trained(cfg):
    """An hf trainer after three steps (so every adapter's B has left zero) and a generation."""
    trainer, engine = trainer_class("hf")(ActorSpec.planned(cfg, 0, 1)), engine_class("hf")(ActorSpec.planned(cfg, 0))
    sync_in_process(trainer, [engine], 0, with_base=True)
    gen = engine.generate(GenerationRequest(PROMPTS, 1, SamplingParams(max_tokens=3)))
    for _ in range(3):
        trainer.train_step(_shard(gen.tokens))
    return trainer, gen.tokens


def _shard(tokens):
    seqs = [p + t for p, t in zip(PROMPTS, tokens, strict=True)]
    return TrainShard(seqs, [len(p) for p in PROMPTS], [1.0, -1.0, 0.5, -0.5] * 2, sum(map(len, tokens)), len(seqs))


def _gap(a, b):
    return max(abs(x - y) for u, v in zip(a, b, strict=True) for x, y in zip(u, v, strict=True))


def _logprobs(model, tokens, temperature):
    from launcher.workers.batch import micro_batches, ungrid
    from launcher.workers.hf.compute import logits_of, target_logprobs

    shard = _shard(tokens)
    out = []
    with torch.no_grad():
        for mb in micro_batches(shard.sequences, shard.prompt_lens, 0, 4096):
            logp_BT, _ = target_logprobs(logits_of(model, mb.ids_BT), mb.ids_BT, temperature, False)
            out += ungrid(logp_BT, mb, shard.prompt_lens, shard.sequences)
    return out


NORMALIZED = ["trainer.lora.normalize_moe_lora=true"]
"""Expert rank 4 / top-2 = 2 in training; sent padded to 4 (scale kept) as the Megatron trainer does."""


@pytest.mark.parametrize("extra", [[], NORMALIZED], ids=["rank", "normalized"])
def test_merged_sync_adapter_sync_and_export_give_the_trainers_logprobs(tmp_path, extra):
    from peft import LoraConfig, PeftModel
    from safetensors.torch import save_file

    from launcher.plan.lora import peft_kwargs
    from launcher.workers.hf import lora
    from launcher.workers.hf.model import build_model

    cfg = _config(*extra)
    trainer, tokens = _trained(cfg)
    want = trainer.logprobs(_shard(tokens))
    experts_B = [p for n, p in trainer.model.named_parameters() if ".mlp.experts." in n and "lora_B" in n]
    assert len(experts_B) == 2 * 3 and all(p.abs().max() > 0 for p in experts_B)  # gate_up, down x 3 MoE layers
    rank = ActorSpec.planned(cfg, 0, 1).plan.lora.expert_rank
    assert all(p.shape[1] == rank * cfg.model.arch.n_routed_experts for p in experts_B)  # trained at the expert rank
    for merge in ("true", "false"):
        synced = _config(f"trainer.lora.merge={merge}", *extra)
        engine = engine_class("hf")(ActorSpec.planned(synced, 0))
        trainer.sync_kind = ActorSpec.planned(synced, 0, 1).plan.sync.kind
        sync_in_process(trainer, [engine], 1, with_base=True)
        assert _gap(_logprobs(engine.model, tokens, cfg.algorithm.temperature), want) < TOL, merge
    # The folder `launcher export --adapter` writes (driver/export.py _write_adapter), loaded as a user would.
    save_file(dict(lora.checkpoint_adapter(trainer.model)), str(tmp_path / "adapter_model.safetensors"))
    LoraConfig(**peft_kwargs(cfg.trainer.lora)).save_pretrained(tmp_path)
    base = build_model(cfg.model, trainer.pad_id, cfg.run.seed, torch.device("cpu"))
    exported = PeftModel.from_pretrained(base, tmp_path).eval()
    assert _gap(_logprobs(exported, tokens, cfg.algorithm.temperature), want) < TOL


def _sent_adapter(trainer) -> dict:
    """The adapter tensors an adapter sync streams (the weight-sync protocol, base left out)."""
    trainer.begin_export(1, False, 1 << 20)
    tensors = {}
    while True:
        info, bucket = trainer.next_bucket()
        if info is None:
            return tensors
        assert info.kind == "adapter"
        tensors.update(bucket.tensors)
        if info.last:
            return tensors


@pytest.mark.parametrize("extra", [[], NORMALIZED], ids=["rank", "normalized"])
def test_the_hf_trainer_sends_the_megatron_trainers_adapter_names_and_shapes(extra):
    """Per expert and projection, gate and up sharing A (Megatron's fused linear_fc1), under
    the checkpoint's module names (model/names.py) that vLLM and peft load."""
    from launcher.workers.megatron import MegatronTrainer
    from tests.unit.megatron_world import init_world_of_one

    cfg = _config("trainer.lora.merge=false", *extra)
    hf = _sent_adapter(trainer_class("hf")(ActorSpec.planned(cfg, 0, 1)))
    init_world_of_one()
    megatron = MegatronTrainer(ActorSpec.planned(_config("trainer.lora.merge=false", "trainer.backend=megatron", *extra),
                                                 0, 1))
    megatron.init_distributed("127.0.0.1", 0)
    sent = _sent_adapter(megatron)
    expert = "base_model.model.model.language_model.layers.1.mlp.experts.7.{}.lora_{}.weight"
    assert {expert.format(p, ab) for p in ("gate_proj", "up_proj", "down_proj") for ab in "AB"} <= hf.keys()
    assert hf.keys() == sent.keys()
    assert all(hf[k].shape == sent[k].shape for k in sent)
    # The planner's adapter sync and export size (plan.lora.params_shipped) is what is sent.
    assert sum(t.numel() for t in sent.values()) == ActorSpec.planned(cfg, 0, 1).plan.lora.params_shipped
    assert torch.equal(hf[expert.format("gate_proj", "A")], hf[expert.format("up_proj", "A")])


def test_a_wrapped_engine_takes_the_base_back_after_sleep_level_two():
    """After level 2 drops its weights, the next with-base sync fills the fused experts under
    their two peft wrappers (`experts.base_layer.base_layer.gate_up_proj`) in place."""
    cfg = _config("trainer.lora.merge=false")
    trainer, tokens = _trained(cfg)
    engine = engine_class("hf")(ActorSpec.planned(cfg, 0))
    sync_in_process(trainer, [engine], 1, with_base=True)
    engine.sleep(2)
    sync_in_process(trainer, [engine], 2, with_base=True)
    engine.wake()
    assert _gap(_logprobs(engine.model, tokens, cfg.algorithm.temperature), trainer.logprobs(_shard(tokens))) < TOL
