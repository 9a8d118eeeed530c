"""The hf trainer and engine without Ray: log-prob agreement, weight sync (full, merged
LoRA, adapter), checkpoints, sleep/wake and seeded sampling."""
import pytest

from launcher.contract.messages import GenerationRequest, SamplingParams, TrainShard
from launcher.contract.spec import ActorSpec
from launcher.weight_sync.messages import WeightUpdate
from launcher.weight_sync.pump import sync_in_process
from launcher.workers import engine_class, trainer_class
from tests.shared_compose import compose_shipped

PROMPTS = [[5, 6, 7]] * 4 + [[8, 9]] * 4
LORA = ["trainer.lora.rank=4", "trainer.lora.alpha=8", "trainer.lora.targets=[linear_proj,q_proj,linear_fc1]"]


def _pair(overrides):
    cfg = compose_shipped(overrides + ["algorithm.max_response_len=3"]).config
    trainer, engine = trainer_class("hf")(ActorSpec.planned(cfg, 0, 1)), engine_class("hf")(ActorSpec.planned(cfg, 0))
    sync_in_process(trainer, [engine], 0, with_base=True)
    return trainer, engine


def _generate(engine, seed=1):
    return engine.generate(GenerationRequest(PROMPTS, seed, SamplingParams(max_tokens=3)))


def _shard(gen, advantages=None):
    seqs = [p + t for p, t in zip(PROMPTS, gen.tokens, strict=True)]
    adv = advantages or [1.0, -1.0, 0.5, -0.5] * 2
    return TrainShard(seqs, [len(p) for p in PROMPTS], adv, sum(len(t) for t in gen.tokens), len(seqs))


def _max_gap(a, b):
    return max(abs(x - y) for u, v in zip(a, b, strict=True) for x, y in zip(u, v, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [[], LORA + ["trainer.lora.merge=true"], LORA + ["trainer.lora.merge=false"],
                                       ["model=tiny_qwen3"]],
                         ids=["full", "lora_merged", "lora_adapter", "plain_causal_lm"])
def test_engine_and_trainer_agree_before_and_after_training(overrides):
    trainer, engine = _pair(overrides)
    gen = _generate(engine)
    assert _max_gap(trainer.logprobs(_shard(gen)), gen.logprobs) < 1e-4
    for _ in range(3):
        stats = trainer.train_step(_shard(gen))
    assert stats["tokens"] == sum(len(t) for t in gen.tokens)
    sent = sync_in_process(trainer, [engine], 1, with_base=False)
    assert ({b.kind for b in sent} == {"adapter"}) == ("trainer.lora.merge=false" in overrides)
    gen2 = _generate(engine, seed=2)
    assert gen2.policy_version == 1
    after = trainer.logprobs(_shard(gen2))
    assert _max_gap(after, gen2.logprobs) < 1e-4
    assert _max_gap(after, trainer.logprobs(_shard(gen2))) == 0.0


@pytest.mark.slow
def test_training_moves_probability_towards_positive_advantages():
    trainer, engine = _pair(["trainer.optimizer.lr=1e-2"])
    gen = _generate(engine)
    shard = _shard(gen)
    before = trainer.logprobs(shard)
    for _ in range(5):
        trainer.train_step(shard)
    after = trainer.logprobs(shard)
    gain = [sum(a) - sum(b) for a, b in zip(after, before, strict=True)]
    assert sum(g for g, a in zip(gain, shard.advantages, strict=True) if a > 0) > 0
    assert sum(g for g, a in zip(gain, shard.advantages, strict=True) if a < 0) < 0


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [[], LORA + ["trainer.lora.targets=[linear_proj,linear_fc1,linear_fc2]"]],
                         ids=["full", "lora_experts"])
def test_checkpoint_round_trip_continues_identically(tmp_path, overrides):
    trainer, engine = _pair(overrides)
    shard = _shard(_generate(engine))
    trainer.train_step(shard)
    trainer.save_checkpoint(str(tmp_path))
    expected = trainer.train_step(shard)
    cfg = compose_shipped(["recipe=tiny_grpo", "algorithm.max_response_len=3", *overrides]).config
    fresh = trainer_class("hf")(ActorSpec.planned(cfg, 0, 1))
    fresh.load_checkpoint(str(tmp_path))
    assert fresh.train_step(shard) == expected


@pytest.mark.slow
def test_sampling_is_seeded():
    _, engine = _pair([])
    assert _generate(engine, 3).tokens == _generate(engine, 3).tokens
    assert _generate(engine, 3).tokens != _generate(engine, 4).tokens


@pytest.mark.slow
def test_sleep_level_two_needs_a_weight_update():
    trainer, engine = _pair([])
    engine.sleep(1)
    with pytest.raises(RuntimeError, match="asleep"):
        _generate(engine)
    engine.wake()
    reference = _generate(engine).tokens
    engine.sleep(2)
    with pytest.raises(RuntimeError, match="without a weight update"):
        engine.wake()
    with pytest.raises(RuntimeError, match="only an adapter|dropped its weights"):
        engine.begin_weight_update(WeightUpdate(1, adapter={"r": 4}))
    sync_in_process(trainer, [engine], 1, with_base=True)
    engine.wake()
    assert _generate(engine).tokens == reference


def test_entropy_bonus_reaches_the_gradient():
    trainer, engine = _pair(["algorithm.entropy_coef=1.0"])
    shard = _shard(_generate(engine), advantages=[0.0] * 8)
    before = trainer.train_step(shard)["entropy"]
    for _ in range(3):
        after = trainer.train_step(shard)["entropy"]
    assert after > before


def test_micro_batches_respect_the_token_budget():
    from launcher.workers.batch import split_rows

    # rows x longest length <= 12: [5, 6] fit (2 x 6), a third row of 6 would need 18
    assert split_rows([5, 6, 6, 2, 2, 13], max_tokens=12) == [[0, 1], [2, 3], [4], [5]]


def test_top_p_restricts_sampling_but_reports_the_full_log_prob():
    import torch

    from launcher.workers.hf.compute import sample_next

    logits_BV = torch.log(torch.tensor([[0.6, 0.3, 0.1]])).repeat(200, 1)
    gen = torch.Generator().manual_seed(0)
    tokens_B, logp_B = sample_next(logits_BV, temperature=1.0, top_p=0.5, generator=gen)
    assert set(tokens_B.tolist()) == {0}
    assert torch.allclose(logp_B, torch.full_like(logp_B, float(torch.log(torch.tensor(0.6)))))
    tokens_B, _ = sample_next(logits_BV, temperature=1.0, top_p=0.8, generator=gen)
    assert set(tokens_B.tolist()) == {0, 1}


def test_fused_experts_load_in_place_and_equal_the_trainers(monkeypatch):
    """A sync after a level-2 sleep writes each per-expert tensor into its fused parameter as it
    arrives (experts_in_place.py): transformers' stacking and concatenation never run for the
    experts, and every engine tensor equals the trainer's."""
    import torch
    from transformers.core_model_loading import MergeModulelist

    trainer, engine = _pair([])
    assert len(engine._assembler().slots) > 0
    engine.sleep(2)
    monkeypatch.setattr(MergeModulelist, "convert", lambda *a, **k: pytest.fail("experts were stacked, not copied in place"))
    sync_in_process(trainer, [engine], 1, with_base=True)
    engine.wake()
    from launcher.workers.hf.names import VISION_PREFIX

    want, got = trainer.model.state_dict(), engine.model.state_dict()
    fused = [n for n in got if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]
    assert fused and want.keys() == got.keys()
    synced = [n for n in want if not n.startswith(VISION_PREFIX)]  # the vision tower is never synced
    assert all(torch.equal(got[n], want[n]) for n in synced)
