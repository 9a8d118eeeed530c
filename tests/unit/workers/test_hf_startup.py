"""An hf engine whose weights the first sync fills builds nothing it throws away: no
weight-init call, no parameter storage (the 4-layer slice's 23.8B parameters included),
buffers real; the first sync then gives it the trainer's exact weights."""
import resource

import pytest
import torch

from launcher.contract.messages import GenerationRequest, SamplingParams
from launcher.contract.spec import ActorSpec
from launcher.weight_sync.pump import sync_in_process
from launcher.workers import engine_class, trainer_class
from launcher.workers.hf.model import VISION_PREFIX, build_model, drop_parameters, materialize
from tests.shared_compose import compose_shipped

PROMPTS = [[5, 6, 7], [8, 9]]


@pytest.fixture
def init_calls(monkeypatch):
    """Counts every call of transformers' per-module weight init (the 9-minute CPU init)."""
    from transformers.modeling_utils import PreTrainedModel

    calls = []
    original = PreTrainedModel._initialize_weights

    def counted(self, module, *args, **kwargs):
        calls.append(type(module).__name__)
        return original(self, module, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "_initialize_weights", counted)
    return calls


def _engine(*overrides):
    cfg = compose_shipped(["recipe=tiny_grpo", "algorithm.max_response_len=3", *overrides]).config
    return cfg, engine_class("hf")(ActorSpec.planned(cfg, 0))


def test_an_engine_filled_by_sync_initializes_and_allocates_nothing(init_calls):
    _, engine = _engine()
    assert init_calls == []
    assert all(p.is_meta for p in engine.model.parameters())
    assert not engine.has_weights
    with pytest.raises(RuntimeError, match="before any weight update"):
        engine.generate(GenerationRequest(PROMPTS, 1, SamplingParams(max_tokens=3)))


def test_the_init_counter_sees_a_random_init(init_calls):
    """The counter above is live: a trainer's random init does call it."""
    cfg = compose_shipped(["recipe=tiny_grpo"]).config
    trainer_class("hf")(ActorSpec.planned(cfg, 0, 1))
    assert len(init_calls) > 10


def test_after_the_first_sync_the_engine_serves_the_trainers_weights():
    cfg, engine = _engine()
    trainer = trainer_class("hf")(ActorSpec.planned(cfg, 0, 1))
    sync_in_process(trainer, [engine], 0, with_base=True)
    theirs = dict(trainer.model.named_parameters())
    language = [(n, p) for n, p in engine.model.named_parameters() if not n.startswith(VISION_PREFIX)]
    assert language and all(torch.equal(p, theirs[n]) for n, p in language)  # the unused vision tower is never synced
    engine.sleep(2)
    assert all(p.is_meta for p in engine.model.parameters())
    sync_in_process(trainer, [engine], 1, with_base=True)
    engine.wake()
    assert engine.generate(GenerationRequest(PROMPTS, 1, SamplingParams(max_tokens=3))).policy_version == 1


def test_materialize_and_drop_keep_buffers_and_ties():
    cfg = compose_shipped(["recipe=tiny_grpo", "model=tiny_qwen3", "model.arch.tie_word_embeddings=true"]).config
    model = build_model(cfg.model, 0, 0, empty=True)
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    assert buffers and all(not b.is_meta for b in buffers.values())  # rotary inv_freq, non-persistent
    materialize(model, "cpu")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert not any(p.is_meta for p in model.parameters())
    drop_parameters(model)
    materialize(model, "cpu")
    assert all(torch.equal(b, buffers[n]) for n, b in model.named_buffers())
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_the_real_width_slice_builds_empty_without_memory(init_calls):
    """glm5_3_flash_4layer: 23.8B parameters (44 GiB in bf16) that the old CPU init filled in
    9 minutes; built empty it takes no parameter memory."""
    cfg = compose_shipped(["recipe=tiny_grpo", "model=glm5_3_flash_4layer", "model.dtype=bfloat16"]).config
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model = build_model(cfg.model, 0, 0, empty=True)
    grown_gib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib) / 2**20
    assert sum(p.numel() for p in model.parameters()) > 23e9
    assert all(p.is_meta for p in model.parameters()) and init_calls == []
    assert grown_gib < 2.0
