"""The folder a vLLM engine starts from.

A checkpoint (model.hf_path) is used as is. A random-init model has no folder, so one is
written holding only config.json (the HF config built from `model.arch`, as the hf
backends build it); the engine starts with load_format="dummy" and the trainer's weights
arrive through the first weight sync before any generation.
"""
import tempfile

from launcher.workers.hf.model import hf_config


def _architecture(model_type: str) -> str:
    """The HF class name vLLM dispatches on (`architectures` in config.json).

    A config built in code has none; multimodal types (glm5_next) map to their
    conditional-generation class, text-only ones to their causal LM.
    """
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    return MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(model_type) or MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]


def engine_model_dir(model_cfg, pad_id: int, eos_id: int) -> str:
    if model_cfg.hf_path:
        return model_cfg.hf_path
    folder = tempfile.mkdtemp(prefix="vllm-model-")
    config = hf_config(model_cfg.arch, pad_id)
    config.eos_token_id = eos_id
    config.architectures = [_architecture(model_cfg.arch.model_type)]
    config.save_pretrained(folder)
    return folder
