"""A miniature HF checkpoint folder built on the spot: config, sharded safetensors, index,
generation config and a trained byte-level BPE tokenizer, in the layout real GLM releases use.

Code that loads checkpoints (the hf_path branch of the backends, weight sync, vLLM) needs a
folder that looks like a real release, and nothing may be downloaded. This writes one from a
model descriptor in a few seconds: the on-disk tensor names are the release names (transformers
reverts its in-memory renames when saving), the weights are split into several shards with an
index, and generation_config lists several eos ids as GLM's does.

    from launcher.workers.hf.tiny_checkpoint import write_tiny_checkpoint
    write_tiny_checkpoint("/tmp/tiny_glm")                  # glm5_next, vision tower included
    write_tiny_checkpoint("/tmp/tiny_qwen3", "tiny_qwen3")  # plain qwen3
    write_tiny_tokenizer("data/tiny_tokenizer")              # the tokenizer files alone
"""
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

# The tiny descriptors' vocab_size: the tokenizer's specials, alphabet and merges fit in it.
VOCAB_SIZE = 64
# GLM's order: <|endoftext|> first, so it is id 0 (pad and eos).
EOS, GMASK, SOP, SYSTEM, USER, ASSISTANT, OBSERVATION = (
    "<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
SPECIAL_TOKENS = [EOS, GMASK, SOP, SYSTEM, USER, ASSISTANT, OBSERVATION]
# Tokens that end a generated turn (GLM's generation_config lists the same three).
STOP_TOKENS = [EOS, USER, OBSERVATION]
# Every character the tokenizer knows. Leaving the other 256 - 49 bytes out of the byte-level
# alphabet is what keeps the vocabulary at 64; text with other characters loses them.
ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz \n=+-*/#.,:?!"
# GLM-4's template: [gMASK]<sop>, then per message its role token, a newline and the content
# (tool results take the observation role). The newline sits after an output, never right
# after a block tag, because transformers renders with trim_blocks (which would drop it).
CHAT_TEMPLATE = (
    "[gMASK]<sop>"
    "{% for message in messages %}"
    "{% set role = 'observation' if message['role'] == 'tool' else message['role'] %}"
    "<|{{ role }}|>\n{{ message['content'] }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _corpus() -> list[str]:
    """Arithmetic prompts and answers like the tiny recipes' tasks (the merges it yields are
    `what`, ` is`, `11`, ...); the alphabet line gives every character a count."""
    lines = [ALPHABET]
    for a in range(0, 100, 7):
        for b in range(0, 100, 11):
            lines += [f"c{a}+{b}={a + b}\n", f"what is {a}*{b}? {a * b}.\n", f"#{a}-{b}: {a - b}!\n"]
    return lines


def build_tokenizer(out_dir) -> "PreTrainedTokenizerFast":
    """Train the byte-level BPE tokenizer on `_corpus`, save it into `out_dir` and return it
    as a PreTrainedTokenizerFast (what AutoTokenizer.from_pretrained(out_dir) also gives)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = byte_level
    bpe.decoder = decoders.ByteLevel()
    # The initial alphabet is the byte-level form of ALPHABET only (space -> Ġ, newline -> Ċ),
    # not ByteLevel.alphabet()'s 256 bytes; vocab_size then caps the number of merges.
    alphabet = [byte_level.pre_tokenize_str(c)[0][0] for c in ALPHABET]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, initial_alphabet=alphabet,
                                  limit_alphabet=len(alphabet), show_progress=False)
    bpe.train_from_iterator(_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS, pad_token=EOS,
                                        extra_special_tokens=SPECIAL_TOKENS[1:], chat_template=CHAT_TEMPLATE)
    # The template goes into tokenizer_config.json (GLM-4's layout) rather than chat_template.jinja.
    tokenizer.save_pretrained(out_dir, save_jinja_files=False)
    return tokenizer


def _descriptor(name: str) -> dict:
    from launcher.config.files import available

    return yaml.safe_load(available("model")[name].read_text())


def _max_shard_bytes(model, shards: int) -> int:
    """Bytes per shard that split the model into at least `shards` files: each shard holds
    at most this much, so total / this >= shards (while no single tensor is larger)."""
    total = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    return max(1, total // shards)


def _check_shards(out_dir: Path, shards: int) -> None:
    written = len(list(out_dir.glob("model*.safetensors")))
    if written < shards:
        raise ValueError(
            f"write_tiny_checkpoint wrote {written} shards, fewer than shards={shards}, because a single tensor "
            f"is larger than total/shards and save_pretrained never splits a tensor; lower shards or shrink the "
            f"largest tensor in arch_overrides.")


def _save_generation_config(out_dir: Path, tokenizer) -> None:
    """Several eos ids, as GLM's release lists them: a turn also ends at the next role token."""
    from transformers import GenerationConfig

    eos_ids = tokenizer.convert_tokens_to_ids(STOP_TOKENS)
    GenerationConfig(eos_token_id=eos_ids, pad_token_id=tokenizer.pad_token_id).save_pretrained(out_dir)


def write_tiny_checkpoint(out_dir, descriptor: str = "tiny", *, shards: int = 5, seed: int = 0,
                          dtype: str | None = None, arch_overrides: dict | None = None, device: str = "cpu") -> Path:
    """Write a random-init checkpoint of `model/descriptors/<descriptor>.yaml` into `out_dir`.

    `arch_overrides` replace arch fields (a benchmark makes a wide model from the tiny one);
    changing num_hidden_layers needs the per-layer lists (layer_types, ...) changed with it.
    The weights are those the hf backend's random init builds from the same arch and seed.
    `dtype` defaults to the descriptor's. Peak memory stays under twice the model: saving makes
    release-format copies of the fused expert and conv weights. `device="cuda"` initializes
    there (the 4-layer slice's 23.8B weights in seconds, not the CPU's minutes). Returns
    `out_dir` as a Path.
    """
    from launcher.config.schema.model import ArchConfig, ModelConfig
    from launcher.workers.hf.model import build_model

    out_dir = Path(out_dir)
    desc = _descriptor(descriptor)
    tokenizer = build_tokenizer(out_dir)
    arch = ArchConfig(**{**desc["arch"], **(arch_overrides or {})})
    model = build_model(ModelConfig(name=descriptor, arch=arch, dtype=dtype or desc["dtype"]),
                        pad_id=tokenizer.pad_token_id, seed=seed, device=device)
    model.save_pretrained(out_dir, max_shard_size=_max_shard_bytes(model, shards))
    _check_shards(out_dir, shards)
    _save_generation_config(out_dir, tokenizer)
    return out_dir


def write_tiny_tokenizer(out_dir) -> Path:
    """The checkpoint's tokenizer files and generation_config.json alone: what the default
    recipe's random-init model reads through model.tokenizer_path (data/tiny_tokenizer is this
    output; tests/unit/test_tiny_checkpoint.py checks it still matches)."""
    out_dir = Path(out_dir)
    _save_generation_config(out_dir, build_tokenizer(out_dir))
    return out_dir


if __name__ == "__main__":  # python -m launcher.workers.hf.tiny_checkpoint OUT_DIR [DESCRIPTOR | tokenizer]
    import sys

    what = sys.argv[2] if len(sys.argv) > 2 else "tiny"
    print(write_tiny_tokenizer(sys.argv[1]) if what == "tokenizer" else write_tiny_checkpoint(sys.argv[1], what))
