"""The fields vLLM's Glm5Next reads and transformers' config lacks (launcher/workers/vllm/glm_config.py).

Main venv, no vllm: the callable is what engine_kwargs hands vLLM as hf_overrides; vLLM
building the model with it is tests/integration/test_vllm_glm_load_weights.py.
"""
from transformers import PreTrainedConfig

from launcher.workers.hf.model import hf_config
from launcher.workers.vllm.args import engine_kwargs
from launcher.workers.vllm.glm_config import fill_glm5_next_fields


def test_a_transformers_written_glm_config_gets_the_fields_its_model_implies(point):
    config = hf_config(point("model=tiny").cfg.model.arch, pad_id=0)
    assert not hasattr(config.text_config, "mhc")  # why the fill exists
    text = fill_glm5_next_fields(config).text_config
    assert (text.mhc, text.mla_use_nope, text.topk_method, text.scoring_func) == (True, True, "noaux_tc", "sigmoid")


def test_a_field_the_checkpoint_has_is_kept(point):
    config = hf_config(point("model=tiny").cfg.model.arch, pad_id=0)
    config.text_config.scoring_func = "softmax"
    assert fill_glm5_next_fields(config).text_config.scoring_func == "softmax"


def test_other_configs_pass_untouched():
    """vLLM probes the callable with a dummy config to see whether it changes model_type."""
    dummy = PreTrainedConfig(architectures=[""], model_type="dummy_glm5_next")
    assert fill_glm5_next_fields(dummy) is dummy and not hasattr(dummy, "mhc")


def test_only_glm_engines_get_the_override(point):
    glm, qwen = point("recipe=tiny_qwen3_vllm", "model=tiny"), point("recipe=tiny_qwen3_vllm")
    assert engine_kwargs(glm.cfg, glm.plan, "/m", on_cpu=True, seed=0)["hf_overrides"] is fill_glm5_next_fields
    assert "hf_overrides" not in engine_kwargs(qwen.cfg, qwen.plan, "/m", on_cpu=True, seed=0)
