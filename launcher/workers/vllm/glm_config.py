"""Config fields vLLM's Glm5Next reads that transformers' Glm5NextTextConfig does not define.

vLLM 0.32 (models/glm5next/common/model.py and attention.py) reads `mhc`, `mla_use_nope`,
`topk_method`, `scoring_func` and `indexer_rope_interleave` off the text config, as a
release config.json carries them. A config that transformers writes (the tiny checkpoints,
the random-init engine folder in _model_dir.py) has none, and vLLM fails building the
first decoder layer (`'Glm5NextTextConfig' object has no attribute 'mhc'`). The engine
hands vLLM `fill_glm5_next_fields` as hf_overrides: it adds each field only where the
config lacks it, with the value transformers' own glm5_next model implies, so a release
config's values always win. Pure Python, no vllm import.
"""

TEXT_MODEL_TYPE = "glm5_next_text"
"""transformers' model_type of Glm5NextTextConfig (the text_config of a glm5_next config)."""


def implied_fields(text_config) -> dict:
    """What transformers' glm5_next modeling builds, in vLLM's terms: mHC in every layer
    (hc_* weights), NoPE MLA when qk_rope_head_dim is 0, sigmoid router scores with the
    e_score_correction_bias the checkpoint stores (DeepSeek's "noaux_tc"). With NoPE the
    indexer's rotary embedding has no dimensions, so its interleave flag changes nothing."""
    return {
        "mhc": True,
        "mla_use_nope": text_config.qk_rope_head_dim == 0,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "indexer_rope_interleave": False,
    }


def fill_glm5_next_fields(config):
    """vLLM's hf_overrides callable (ModelConfig applies it to the loaded HF config). vLLM
    also calls it on a dummy config, to see whether it changes model_type: other configs
    pass through untouched."""
    text_config = getattr(config, "text_config", config)
    if getattr(text_config, "model_type", None) != TEXT_MODEL_TYPE:
        return config
    for field, value in implied_fields(text_config).items():
        if not hasattr(text_config, field):
            setattr(text_config, field, value)
    return config
