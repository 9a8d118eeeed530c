"""The `megatron` trainer backend on CPU (a world of one): same log-probs as the hf trainer
on the same weights, a GRPO step, and weight sync into the hf engine (merged, and LoRA
adapter + base) reproducing the trainer's own log-probs.
"""
import pytest

from launcher.contract.spec import ActorSpec
from launcher.weight_sync.pump import sync_in_process
from tests.unit.megatron_world import init_world_of_one

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SEQS = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]
PROMPTS = [4, 3, 5]


def _config(*overrides):
    from launcher.config.compose import compose

    return compose(["recipe=tiny_grpo", "trainer.backend=megatron", *overrides]).config


def _shard():
    from launcher.contract.messages import TrainShard

    tokens = sum(len(s) - p for s, p in zip(SEQS, PROMPTS, strict=True))
    return TrainShard(sequences=SEQS, prompt_lens=PROMPTS, advantages=[1.0, -0.5, 0.25],
                      tokens_in_mini_batch=tokens, seqs_in_mini_batch=len(SEQS))


def _trainer(cfg):
    from launcher.workers.megatron import MegatronTrainer

    init_world_of_one()
    trainer = MegatronTrainer(ActorSpec.planned(cfg, 0, 1))
    trainer.init_distributed("127.0.0.1", 0)
    return trainer


def _engine_logprobs(engine, cfg):
    from launcher.workers.batch import micro_batches, ungrid
    from launcher.workers.hf.compute import logits_of, target_logprobs

    out = []
    for mb in micro_batches(SEQS, PROMPTS, 0, 4096):
        logp_BT, _ = target_logprobs(logits_of(engine.model, mb.ids_BT), mb.ids_BT, cfg.algorithm.temperature, False)
        out += ungrid(logp_BT.detach(), mb, PROMPTS, SEQS)
    return out


def _close(a, b, atol=2e-5):
    return all(torch.allclose(torch.tensor(x), torch.tensor(y), atol=atol) for x, y in zip(a, b, strict=True))


@pytest.mark.slow
def test_logprobs_match_hf_trainer_and_merged_sync_reproduces_them():
    from launcher.workers.hf import HfEngine, HfTrainer
    from launcher.workers.hf.model import checkpoint_state
    from model.megatron.weights import load_hf_state

    cfg = _config()
    trainer = _trainer(cfg)
    reference = HfTrainer(ActorSpec.planned(_config("trainer.backend=hf"), 0, 1))
    load_hf_state(trainer.model, checkpoint_state(reference.model))
    assert _close(trainer.logprobs(_shard()), reference.logprobs(_shard()))
    stats = trainer.train_step(_shard())
    assert torch.isfinite(torch.tensor(stats["loss"])) and stats["grad_norm"] > 0
    engine = HfEngine(ActorSpec.planned(cfg, 0))
    sync_in_process(trainer, [engine], version=1, with_base=False, max_bucket_bytes=64 << 10)
    assert _close(_engine_logprobs(engine, cfg), trainer.logprobs(_shard()))


ATTENTION = "trainer.lora.targets=[q_proj,o_proj,linear_q_up_proj,linear_proj,linear_kv_down_proj]"
EXPERTS = "trainer.lora.targets=[linear_proj,linear_fc1,linear_fc2,q_proj,k_proj,v_proj,o_proj]"


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[ATTENTION], [EXPERTS], [EXPERTS, "trainer.lora.normalize_moe_lora=true"],
                                   [EXPERTS, "trainer.lora.share_expert_adapters=true"],
                                   ["trainer.lora.targets=[linear_fc1]"]],
                         ids=["attention", "experts", "experts_normalized", "experts_shared", "gate_up_only"])
def test_lora_adapter_sync_reproduces_trainer_logprobs(extra):
    """The adapter the Megatron trainer sends (per-expert names for the routed experts, padded
    to the rank; a shared expert adapter repeated per expert) loads into the hf engine's fused
    experts through peft and gives the trainer's log-probs (issue 41's first-sync failure)."""
    from launcher.workers.hf import HfEngine

    cfg = _config("trainer.lora.rank=4", "trainer.lora.alpha=8", "trainer.lora.merge=false", *extra)
    trainer = _trainer(cfg)
    for _ in range(2):
        trainer.train_step(_shard())
    engine = HfEngine(ActorSpec.planned(cfg, 0))
    sent = sync_in_process(trainer, [engine], version=2, with_base=True, max_bucket_bytes=64 << 10)
    assert [b.kind for b in sent][0] == "weights" and [b.kind for b in sent][-1] == "adapter"
    experts_B = [p for n, p in engine.model.named_parameters() if ".mlp.experts." in n and "lora_B" in n]
    assert bool(experts_B) == ("linear_fc1" in extra[0])
    assert not experts_B or any(p.abs().max() > 0 for p in experts_B)  # trained expert adapters arrived
    assert _close(_engine_logprobs(engine, cfg), trainer.logprobs(_shard()))


@pytest.mark.slow
def test_registry_imports_the_megatron_backend_in_a_fresh_interpreter():
    """How `python -m launcher trainer.backend=megatron` finds it: the registry imports the
    subpackage first (a circular import through the hf package once broke exactly this,
    while in-process tests that had imported hf first passed)."""
    import subprocess
    import sys

    code = "from launcher.workers.registry import trainer_class; print(trainer_class('megatron').__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "MegatronTrainer"
