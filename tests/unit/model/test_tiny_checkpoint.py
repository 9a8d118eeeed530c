"""The tiny checkpoint fixtures look like a real release: they load with from_pretrained,
their config is the descriptor's, weights are sharded with an index under GLM's on-disk names,
generation stops at several eos ids, and the tokenizer fits the model's 64-id vocabulary."""
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from launcher.workers.hf.model import _model_class  # noqa: E402
from launcher.workers.hf.tiny_checkpoint import _descriptor  # noqa: E402

CHECKPOINTS = [("tiny_glm_checkpoint", "tiny"), ("tiny_qwen3_checkpoint", "tiny_qwen3")]


@pytest.fixture(params=CHECKPOINTS, ids=[d for _, d in CHECKPOINTS])
def checkpoint(request):
    """(folder, descriptor name) for each fixture."""
    fixture, descriptor = request.param
    return request.getfixturevalue(fixture), descriptor


def _text_config(config):
    return getattr(config, "text_config", config)


def _index(folder) -> dict:
    return json.loads((folder / "model.safetensors.index.json").read_text())


def test_loads_with_from_pretrained_without_missing_or_unexpected_keys(checkpoint):
    folder, descriptor = checkpoint
    arch = _descriptor(descriptor)["arch"]
    model, info = _model_class(arch["model_type"]).from_pretrained(folder, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert model.dtype == getattr(torch, _descriptor(descriptor)["dtype"])


def test_loaded_weights_are_the_hf_backends_random_init_with_the_same_seed(checkpoint):
    """Saving reverts transformers' fused in-memory layout and loading fuses it again, losslessly."""
    from transformers import AutoTokenizer

    from launcher.config.schema.model import ArchConfig, ModelConfig
    from launcher.workers.hf.model import build_model

    folder, descriptor = checkpoint
    desc = _descriptor(descriptor)
    built = build_model(ModelConfig(arch=ArchConfig(**desc["arch"]), dtype=desc["dtype"]),
                        pad_id=AutoTokenizer.from_pretrained(folder).pad_token_id, seed=0).state_dict()
    loaded = _model_class(desc["arch"]["model_type"]).from_pretrained(folder).state_dict()
    assert loaded.keys() == built.keys()
    assert all(torch.equal(loaded[k], built[k]) for k in built)


def test_config_holds_the_descriptor_arch(checkpoint):
    from transformers import AutoConfig

    folder, descriptor = checkpoint
    arch = _descriptor(descriptor)["arch"]
    config = AutoConfig.from_pretrained(folder)
    text = _text_config(config)
    assert config.model_type == arch["model_type"]
    shared = {k for k in arch if k != "model_type" and hasattr(text, k)}
    assert len(shared) > len(arch) // 2  # the comparison is not vacuous
    assert {k: getattr(text, k) for k in shared} == {k: arch[k] for k in shared}


def test_weights_are_sharded_and_the_index_names_every_shard(checkpoint):
    folder, _ = checkpoint
    shards = {p.name for p in folder.glob("model-*-of-*.safetensors")}
    assert len(shards) >= 5
    assert set(_index(folder)["weight_map"].values()) == shards


def test_generation_config_lists_several_eos_ids(checkpoint):
    from transformers import GenerationConfig

    folder, _ = checkpoint
    generation = GenerationConfig.from_pretrained(folder)
    assert isinstance(generation.eos_token_id, list) and len(generation.eos_token_id) >= 2
    assert generation.pad_token_id is not None


def test_tokenizer_fits_the_vocab_and_renders_the_glm_chat_template(checkpoint):
    from transformers import AutoConfig, AutoTokenizer

    folder, _ = checkpoint
    tok = AutoTokenizer.from_pretrained(folder)
    vocab_size = _text_config(AutoConfig.from_pretrained(folder)).vocab_size
    assert len(tok) <= vocab_size and max(tok.get_vocab().values()) < vocab_size
    chat = [{"role": "user", "content": "c57="}]
    text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert text == "[gMASK]<sop><|user|>\nc57=<|assistant|>\n"
    ids = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert tok.decode(ids) == text
    for s in ("c57=", "57", "what is 3*4? 12.\n"):
        assert tok.decode(tok.encode(s, add_special_tokens=False)) == s


def test_glm_shards_use_the_release_tensor_names(tiny_glm_checkpoint):
    """transformers fuses these in memory (forget_gate.*, attn_hc.*, experts.gate_up_proj,
    conv1d); a release checkpoint, and so this one, stores them split under these names."""
    from safetensors import safe_open

    keys = set()
    for shard in tiny_glm_checkpoint.glob("model-*.safetensors"):
        with safe_open(shard, "pt") as f:
            keys |= set(f.keys())
    layer = "model.language_model.layers"
    for name in ("0.self_attn.f_a_proj.weight", "0.self_attn.q_conv1d.weight", "0.hc_attn_fn",
                 "1.mlp.experts.0.gate_proj.weight", "1.mlp.experts.0.up_proj.weight", "3.self_attn.indexer.wk.weight"):
        assert f"{layer}.{name}" in keys
    assert keys == set(_index(tiny_glm_checkpoint)["weight_map"])


def test_shipped_demo_tokenizer_is_the_fixture_tokenizer(tmp_path):
    """data/tiny_tokenizer (model.tokenizer_path of the default recipe) is what
    write_tiny_tokenizer builds today: a tokenizers upgrade that changes the merges fails here,
    not as a silently different demo."""
    from launcher.rl.tokenizer import HfTokenizer
    from launcher.workers.hf.tiny_checkpoint import write_tiny_tokenizer

    fresh, shipped = write_tiny_tokenizer(tmp_path), Path(__file__).parents[3] / "data/tiny_tokenizer"
    for name in ("tokenizer.json", "generation_config.json"):
        ours, theirs = json.loads((shipped / name).read_text()), json.loads((fresh / name).read_text())
        ours.pop("transformers_version", None), theirs.pop("transformers_version", None)
        assert ours == theirs, name
    tok = HfTokenizer(str(shipped), "model.tokenizer_path")
    assert tok.eos_ids == (0, 4, 6) and tok.has_chat_template and tok.vocab_size == 64
    prompt = tok.encode(tok.chat_text([{"role": "user", "content": "c5."}]))
    assert prompt[:3] == [1, 2, 4] and prompt[-2] == 5 and len(prompt) == 9  # [gMASK]<sop><|user|> ... <|assistant|>\n
    assert tok.decode(tok.encode("57") + [0, 9]) == "57"  # a response ends at its first eos id
