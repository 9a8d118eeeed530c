"""Tokenizers: a built-in character tokenizer for random-init models, HF's for checkpoints.

A random-init model (model.hf_path null) has no tokenizer on disk and nothing may be
downloaded, so the tiny recipes use a fixed character vocabulary built here. Its ids are
stable across versions because checkpoints and rollouts store ids, not text.
"""
from typing import Protocol

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
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class CharTokenizer:
    """One id per character; upper case folds to lower case, other characters become <unk>."""

    pad_id = PAD_ID
    eos_id = EOS_ID

    def __init__(self, vocab_size: int):
        if vocab_size < _SPECIALS + len(CHARS):
            raise ValueError(
                f"model.arch.vocab_size={vocab_size} is smaller than the character tokenizer's "
                f"{_SPECIALS + len(CHARS)} symbols; raise it to at least that."
            )
        self.vocab_size = vocab_size
        self._id_of = {c: i + _SPECIALS for i, c in enumerate(CHARS)}

    def encode(self, text: str) -> list[int]:
        return [self._id_of.get(c, UNK_ID) for c in text.lower()]

    def decode(self, ids: list[int]) -> str:
        out = []
        for i in ids:
            if i == EOS_ID:
                break
            out.append(CHARS[i - _SPECIALS] if _SPECIALS <= i < _SPECIALS + len(CHARS) else UNK_TEXT)
        return "".join(out)


class HfTokenizer:
    """Wraps a checkpoint's tokenizer (model.hf_path) behind the same small interface."""

    def __init__(self, hf_path: str):
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(hf_path)
        self.eos_id = self._tok.eos_token_id
        self.pad_id = self._tok.pad_token_id if self._tok.pad_token_id is not None else self.eos_id
        self.vocab_size = len(self._tok)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self._tok.decode(ids, skip_special_tokens=True)


def make_tokenizer(hf_path: str | None, vocab_size: int) -> Tokenizer:
    return HfTokenizer(hf_path) if hf_path else CharTokenizer(vocab_size)
