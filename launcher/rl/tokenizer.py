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



def cut_at_eos(ids: list[int], eos_ids) -> list[int]:
    """The ids before the first of any EOS id (a response's text ends there)."""
    stops = [ids.index(e) for e in eos_ids if e in ids]
    return ids[: min(stops)] if stops else ids

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


def _response_end_ids(own_eos_id: int | None, folder: str, key: str) -> tuple[int, ...]:
    """Tokenizer.eos_ids of a tokenizer folder, for HfTokenizer and TemplateTokenizer alike (so
    validate's pre-flight stops where the run does): the tokenizer's own eos id first (else
    generation_config.json's first), then every other id generation_config.json lists. Raises
    TokenizerFolderError when neither names one: no response could end."""
    listed = generation_eos_ids(folder)
    first = own_eos_id if own_eos_id is not None else (listed[0] if listed else None)
    if first is None:
        raise TokenizerFolderError(f"{key}={folder}: neither the tokenizer nor generation_config.json names an "
                                   "eos token, so no response could end; add eos_token_id to generation_config.json")
    return tuple(dict.fromkeys([first, *listed]))


class HfTokenizer:
    """Wraps an HF tokenizer folder behind the same small interface; `key` is the config key
    that named the folder (for messages)."""

    def __init__(self, hf_path: str, key: str = "model.hf_path"):
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(hf_path)
        self.eos_ids = _response_end_ids(self._tok.eos_token_id, hf_path, key)
        self.eos_id = self.eos_ids[0]
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
        return self._tok.decode(cut_at_eos(ids, self.eos_ids), skip_special_tokens=True)

    def chat_text(self, messages: list[dict]) -> str:
        return self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


class TemplateTokenizer:
    """The same tokenizer folder read without transformers: its tokenizer.json by the
    `tokenizers` library and its chat template rendered by jinja2 the way
    transformers' apply_chat_template renders it (sandboxed, trim_blocks and lstrip_blocks,
    loop controls, its tojson / raise_exception / strftime_now, the special tokens as
    variables). Validate's data pre-flight counts prompts with it: no torch is imported,
    and tests/unit/validate/test_data_preflight.py checks it gives HfTokenizer's text and ids.
    Raises TokenizerFolderError when the folder has no tokenizer.json."""

    def __init__(self, folder: str, key: str = "model.hf_path"):
        import tokenizers

        root = Path(folder)
        file = root / "tokenizer.json"
        if not file.is_file():
            raise TokenizerFolderError(f"{key}={folder} has no tokenizer.json (a slow-only tokenizer needs "
                                       "transformers to read it)")
        self._tok = tokenizers.Tokenizer.from_file(str(file))
        config = _json_file(root / "tokenizer_config.json")
        self._specials = {name: _token_text(config.get(name)) for name in _SPECIAL_TOKEN_NAMES
                          if _token_text(config.get(name)) is not None}
        self.chat_template = _chat_template(root, config)
        self.has_chat_template = bool(self.chat_template)
        own = self._tok.token_to_id(self._specials["eos_token"]) if "eos_token" in self._specials else None
        self.eos_ids = _response_end_ids(own, folder, key)
        self.eos_id = self.eos_ids[0]
        pad = self._tok.token_to_id(self._specials["pad_token"]) if "pad_token" in self._specials else None
        self.pad_id = pad if pad is not None else self.eos_id
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.identity = json.dumps([str(root.resolve()), self.vocab_size, self.chat_template, _mtime(file)])
        self._template = None

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(cut_at_eos(ids, self.eos_ids), skip_special_tokens=True)

    def chat_text(self, messages: list[dict]) -> str:
        if not self.chat_template:
            raise ValueError("this tokenizer has no chat template")
        if self._template is None:
            self._template = _compile_template(self.chat_template)
        return self._template.render(messages=messages, tools=None, documents=None, add_generation_prompt=True,
                                     **self._specials)

    def __getstate__(self):
        return {**self.__dict__, "_template": None}  # a compiled jinja2 template does not pickle


class TokenizerFolderError(ValueError):
    """A tokenizer folder that cannot be read as the run would read it; the message says why."""


_SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _json_file(file: Path) -> dict:
    if not file.is_file():
        return {}
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as err:
        raise TokenizerFolderError(f"{file}: not valid JSON ({err})") from err
    return value if isinstance(value, dict) else {}


def _token_text(value) -> str | None:
    """A special token of tokenizer_config.json: a string, or an AddedToken dict's content."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _chat_template(root: Path, config: dict) -> str | None:
    """The folder's chat template as transformers picks it: chat_template.jinja, else
    chat_template.json's, else tokenizer_config.json's (a list of named ones: `default`)."""
    if (root / "chat_template.jinja").is_file():
        return (root / "chat_template.jinja").read_text(encoding="utf-8")
    template = _json_file(root / "chat_template.json").get("chat_template") or config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) and template else None


def _compile_template(source: str):
    import datetime

    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` (assistant-mask markers) render their body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(source)


def _mtime(file: Path) -> float | None:
    return file.stat().st_mtime if file.exists() else None


def tokenizer_folder(model_cfg) -> tuple[str, Path] | None:
    """(config key, folder) of the model's tokenizer: model.tokenizer_path (a relative path is
    looked up as data files are: launcher.paths.resolve_data_path), else
    model.hf_path; None for the character tokenizer."""
    if model_cfg.tokenizer_path:
        return "model.tokenizer_path", resolve_data_path(model_cfg.tokenizer_path)
    if model_cfg.hf_path:
        return "model.hf_path", Path(model_cfg.hf_path)
    return None


def preflight_tokenizer(model_cfg) -> Tokenizer:
    """The run's tokenizer (make_tokenizer's folder, same ids and chat template) read without
    transformers or torch: for validate. Raises TokenizerFolderError."""
    found = tokenizer_folder(model_cfg)
    if found is None:
        return CharTokenizer(model_cfg.arch.vocab_size)
    key, folder = found
    if not folder.is_dir():
        raise TokenizerFolderError(f"{key}={folder} is not a folder")
    return TemplateTokenizer(str(folder), key)


def make_tokenizer(model_cfg) -> Tokenizer:
    """The tokenizer every process of a run uses (driver, trainers, engines: same ids)."""
    found = tokenizer_folder(model_cfg)
    if found is None:
        return CharTokenizer(model_cfg.arch.vocab_size)
    key, folder = found
    return HfTokenizer(str(folder), key)
