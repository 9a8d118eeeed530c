"""Tokenizers: HF's from a folder on disk, or a built-in character tokenizer.

The folder is model.tokenizer_path, else the checkpoint's (model.hf_path). A random-init
model without either has no tokenizer on disk and nothing may be downloaded, so it gets a
fixed character vocabulary built here, whose ids are stable across versions because
checkpoints and rollouts store ids, not text. The default recipe instead pairs its random
init with the tiny checkpoint fixture's trained BPE tokenizer and chat template
(data/tiny_tokenizer/), so the laptop demo reads prompts as a real checkpoint would.

A checkpoint's turn can end at several tokens: GLM's generation_config.json lists
<|endoftext|>, <|user|> and <|observation|>. `eos_ids` holds all of them; the engines stop
on any (hf sampling, vLLM's stop_token_ids) and `decode` cuts a response at the first.
"""
import json
from pathlib import Path
from typing import Protocol

from launcher.paths import resolve_data_path

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
_SPECIALS = 3
# Order is part of the format (ids are stored in checkpoints' rollouts): append only.
# Ids without a character (specials, the vocabulary's unused tail) decode to a visible mark,
# so a policy cannot pad an answer with tokens that print as nothing.
UNK_TEXT = "\ufffd"
CHARS = "0123456789abcdefghijklmnopqrstuvwxyz =+-*/#.,:;?!()$%'\"\n<>"


class Tokenizer(Protocol):
    pad_id: int
    eos_id: int
    """The tokenizer's own end-of-text id (the random-init model's config and pad fallback)."""
    eos_ids: tuple[int, ...]
    """Every id that ends a response (eos_id first)."""
    vocab_size: int
    has_chat_template: bool
    identity: str
    """What the ids depend on (a cache key for the data's token counts)."""

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def decode(self, ids: list[int]) -> str: ...

    def chat_text(self, messages: list[dict]) -> str:
        """The chat template applied to `messages`, ending with the assistant's opening
        (add_generation_prompt); `encode` of it gives the template's ids."""
        ...


class CharTokenizer:
    """One id per character; upper case folds to lower case, other characters become <unk>."""

    pad_id = PAD_ID
    eos_id = EOS_ID
    eos_ids = (EOS_ID,)
    has_chat_template = False

    def __init__(self, vocab_size: int):
        if vocab_size < _SPECIALS + len(CHARS):
            raise ValueError(
                f"model.arch.vocab_size={vocab_size} is smaller than the character tokenizer's "
                f"{_SPECIALS + len(CHARS)} symbols; raise it to at least that."
            )
        self.vocab_size = vocab_size
        self.identity = f"char:{vocab_size}:{CHARS}"
        self._id_of = {c: i + _SPECIALS for i, c in enumerate(CHARS)}

    def encode(self, text: str) -> list[int]:
        return [self._id_of.get(c, UNK_ID) for c in text.lower()]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: list[int]) -> str:
        out = []
        for i in ids:
            if i == EOS_ID:
                break
            out.append(CHARS[i - _SPECIALS] if _SPECIALS <= i < _SPECIALS + len(CHARS) else UNK_TEXT)
        return "".join(out)

    def chat_text(self, messages: list[dict]) -> str:
        raise ValueError("the character tokenizer (random-init model) has no chat template; data.chat_template=auto "
                         "gives raw text for it")


def generation_eos_ids(hf_path: str) -> list[int]:
    """eos_token_id of the checkpoint's generation_config.json (an int or a list), [] without one."""
    file = Path(hf_path) / "generation_config.json"
    if not file.is_file():
        return []
    value = json.loads(file.read_text()).get("eos_token_id")
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, list) else [value])]


class HfTokenizer:
    """Wraps an HF tokenizer folder behind the same small interface; `key` is the config key
    that named the folder (for messages)."""

    def __init__(self, hf_path: str, key: str = "model.hf_path"):
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(hf_path)
        own = self._tok.eos_token_id
        listed = generation_eos_ids(hf_path)
        self.eos_id = own if own is not None else (listed[0] if listed else None)
        if self.eos_id is None:
            raise ValueError(f"{key}={hf_path}: neither the tokenizer nor generation_config.json names an "
                             "eos token, so no response could end; add eos_token_id to generation_config.json")
        self.eos_ids = tuple(dict.fromkeys([self.eos_id, *listed]))
        self.pad_id = self._tok.pad_token_id if self._tok.pad_token_id is not None else self.eos_id
        self.vocab_size = len(self._tok)
        self.has_chat_template = bool(self._tok.chat_template)
        self.identity = json.dumps([str(Path(hf_path).resolve()), self.vocab_size, self._tok.chat_template,
                                    _mtime(Path(hf_path) / "tokenizer.json")])

    def encode(self, text: str) -> list[int]:
        # Special tokens written in the text ([gMASK], <|user|>, ... of a rendered chat
        # template) are parsed as their ids, so encode(chat_text(m)) is the template's ids.
        return self._tok.encode(text, add_special_tokens=False)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._tok(texts, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        stops = [ids.index(e) for e in self.eos_ids if e in ids]
        if stops:
            ids = ids[: min(stops)]
        return self._tok.decode(ids, skip_special_tokens=True)

    def chat_text(self, messages: list[dict]) -> str:
        return self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def _mtime(file: Path) -> float | None:
    return file.stat().st_mtime if file.exists() else None


def tokenizer_folder(model_cfg) -> tuple[str, Path] | None:
    """(config key, folder) of the model's tokenizer: model.tokenizer_path (a relative path is
    taken from the working directory, else the project root, as data files are), else
    model.hf_path; None for the character tokenizer."""
    if model_cfg.tokenizer_path:
        return "model.tokenizer_path", resolve_data_path(model_cfg.tokenizer_path)
    if model_cfg.hf_path:
        return "model.hf_path", Path(model_cfg.hf_path)
    return None


def make_tokenizer(model_cfg) -> Tokenizer:
    """The tokenizer every process of a run uses (driver, trainers, engines: same ids)."""
    found = tokenizer_folder(model_cfg)
    if found is None:
        return CharTokenizer(model_cfg.arch.vocab_size)
    key, folder = found
    return HfTokenizer(str(folder), key)
