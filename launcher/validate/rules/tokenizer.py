"""Tokenizer rules: the run's tokenizer folder (model.tokenizer_path, else model.hf_path) read
as JSON, against the model it feeds: every id fits the embedding, and every id that ends a
response (the generation config's eos_token_id, the tokenizer's own eos_token) is a token
of the tokenizer and one the model can sample. Plain JSON: no tokenizers, no torch."""
import functools
from dataclasses import dataclass
from pathlib import Path

from launcher.config.model_folder import ModelFolderError, load_json
from launcher.rl.tokenizer import tokenizer_folder
from launcher.validate.registry import error, rule

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
GENERATION_CONFIG = "generation_config.json"


@dataclass(frozen=True)
class TokenTable:
    """A tokenizer.json's ids: its vocabulary and added tokens."""

    ids: frozenset[int]
    id_of: dict[str, int]

    @property
    def count(self) -> int:
        """1 + the largest id: how many embedding rows the tokenizer can index."""
        return max(self.ids, default=-1) + 1


@functools.lru_cache(maxsize=8)
def _table(file: Path, mtime: float) -> TokenTable:
    data = load_json(file)
    vocab = data.get("model", {}).get("vocab", {})
    # BPE / WordPiece: {token: id}; Unigram: [[piece, score], ...] whose index is the id.
    id_of = dict(vocab) if isinstance(vocab, dict) else {piece[0]: i for i, piece in enumerate(vocab)}
    id_of.update({t["content"]: t["id"] for t in data.get("added_tokens", [])})
    return TokenTable(frozenset(id_of.values()), id_of)


def token_table(file: Path) -> TokenTable:
    """The ids of a tokenizer.json, cached per file version (sweeps validate one folder at every point)."""
    return _table(file, file.stat().st_mtime)


def _found(cfg) -> tuple[str, Path, TokenTable] | None:
    """(config key, folder, its token table) of the run's tokenizer; None for the character
    tokenizer or a folder without a readable tokenizer.json (MODEL007, DATA006 say so)."""
    found = tokenizer_folder(cfg.model)
    if found is None or not (found[1] / TOKENIZER_FILE).is_file():
        return None
    try:
        return found[0], found[1], token_table(found[1] / TOKENIZER_FILE)
    except (ModelFolderError, AttributeError, KeyError, TypeError):
        return None


@rule("MODEL007")
def tokenizer_fits(cfg, plan):
    """The tokenizer folder has a tokenizer.json (model.tokenizer_path) whose ids fit the
    embedding (an id past model.arch.vocab_size would index past it mid-rollout)."""
    path = cfg.model.tokenizer_path
    found = tokenizer_folder(cfg.model)
    if path is not None and not (found[1] / TOKENIZER_FILE).is_file():
        yield error("model.tokenizer_path", f"model.tokenizer_path={path}: no {TOKENIZER_FILE} in {found[1]}",
                    "Every process of the run loads the tokenizer from that folder (transformers' fast tokenizer "
                    "file).", "Point it at a folder save_pretrained wrote (tokenizer.json, tokenizer_config.json), "
                    "or null for the checkpoint's or the built-in character tokenizer.")
        return
    if (table := _found(cfg)) is None:
        return
    key, folder, tokens = table
    if tokens.count > cfg.model.arch.vocab_size:
        yield error(key, f"{key}={folder}: {folder / TOKENIZER_FILE} has {tokens.count} token ids, more than "
                    f"model.arch.vocab_size={cfg.model.arch.vocab_size}",
                    "Ids past the vocabulary have no embedding row; the first prompt holding one would fail inside "
                    "the forward.", f"Raise model.arch.vocab_size to at least {tokens.count}, or use a tokenizer "
                    "with fewer ids.")


def _generation_eos(folder: Path) -> tuple[Path, list] | None:
    """(generation_config.json, its eos_token_id as a list) of a folder that has one."""
    file = folder / GENERATION_CONFIG
    if not file.is_file():
        return None
    try:
        value = load_json(file).get("eos_token_id")
    except (ModelFolderError, AttributeError):
        return None
    return file, [] if value is None else value if isinstance(value, list) else [value]


def _own_eos(folder: Path, tokens: TokenTable) -> int | None:
    """The id of tokenizer_config.json's eos_token, when the tokenizer has that token."""
    try:
        eos = load_json(folder / TOKENIZER_CONFIG).get("eos_token") if (folder / TOKENIZER_CONFIG).is_file() else None
    except (ModelFolderError, AttributeError):
        return None
    text = eos.get("content") if isinstance(eos, dict) else eos
    return tokens.id_of.get(text) if isinstance(text, str) else None


@rule("MODEL008")
def eos_ids_known(cfg, plan):
    """Every eos_token_id of the generation configs (model.hf_path's, and the tokenizer
    folder's) is a token of the run's tokenizer and below model.arch.vocab_size, and some id
    ends a response at all (the tokenizer's eos_token or a generation config's)."""
    if (table := _found(cfg)) is None:
        return
    key, folder, tokens = table
    vocab = cfg.model.arch.vocab_size
    folders = dict.fromkeys(p for p in (Path(cfg.model.hf_path) if cfg.model.hf_path else None, folder) if p)
    listed = [found for f in folders if (found := _generation_eos(f)) is not None]
    for file, ids in listed:
        unknown = [i for i in ids if not isinstance(i, int) or i not in tokens.ids]
        past = [i for i in ids if isinstance(i, int) and i >= vocab]
        if unknown:
            yield error(key, f"{file} has eos_token_id={ids}: {unknown} not a token of {folder / TOKENIZER_FILE} "
                        f"({len(tokens.ids)} tokens, ids up to {tokens.count - 1})",
                        "The engines end a response at these ids and the driver cuts its text there; the model "
                        "was trained to end with a token this tokenizer does not have, so responses run to "
                        "algorithm.max_response_len and every one is scored as cut off.",
                        f"Point {key} at the model's own tokenizer (the one {file.name} was written with), or fix "
                        f"eos_token_id in {file}.")
        elif past:
            yield error(key, f"{file} has eos_token_id={ids}: {past} not below model.arch.vocab_size={vocab}",
                        "An id past the vocabulary has no logit, so the engines can never sample it and no response "
                        "ends there.", f"Fix eos_token_id in {file}, or raise model.arch.vocab_size.")
    if _own_eos(folder, tokens) is None and not any(ids for _, ids in listed):
        yield error(key, f"{key}={folder}: no eos token: {TOKENIZER_CONFIG} names no eos_token that "
                    f"{TOKENIZER_FILE} has, and no {GENERATION_CONFIG} lists an eos_token_id",
                    "Nothing could end a response: every rollout would run to algorithm.max_response_len, and the "
                    "run's tokenizer refuses the folder when it loads.",
                    f"Add eos_token_id to {folder / GENERATION_CONFIG} (or eos_token to {TOKENIZER_CONFIG}).")
