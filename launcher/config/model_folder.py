"""The HF model folder (`model.hf_path`) read as plain JSON: its architecture and whether its
weight files are there. ("Model folder": the weights the run starts from; "checkpoint" in this
project is the training checkpoint, the run state a resume reads: launcher/driver/records/checkpoint.py.)

With `model.hf_path` set, the folder's config.json is the architecture (docs/design.md,
"Checkpoints and formats"): compose copies every field `ArchConfig` knows from it into
`model.arch` (arch_values), MODEL003 names each file the trainer could not load
(config_problems, weight_problems) and MODEL006 each `model.arch` value that disagrees.
Pure standard library (no torch, no transformers): validation stays well under a second.

glm5_next keeps its text fields under `text_config` (the vision tower has its own); every
other model type (qwen3, llama, ...) keeps them at the top level.
"""
import dataclasses
import functools
import importlib.util
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.config.schema.keys import type_name
from launcher.config.schema.model import ArchConfig

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
GLM5_NEXT = "glm5_next"

MEGATRON_MODEL_TYPES = (GLM5_NEXT,)
"""What the megatron trainer builds: the project's GLM-5.3-Flash code in model/megatron."""
HF_MODEL_TYPES = (GLM5_NEXT, "qwen3", "qwen3_moe", "qwen2", "qwen2_moe", "llama", "mistral", "mixtral", "gemma",
                  "gemma2", "phi3", "gpt2", "olmo2", "deepseek_v3", "glm4", "glm4_moe")
"""Model types the hf trainer builds even where transformers cannot be found on this machine;
with transformers installed, any type it has a `models/<type>` package for is accepted too."""

ABSENT_WHEN_NOT_GLM5_NEXT: dict[str, Any] = {"n_routed_experts": 0, "num_experts_per_tok": 0, "n_shared_experts": 0,
                                             "hc_mult": 1, "swiglu_limit": None, "layer_types": None,
                                             "mlp_layer_types": None, "indexer_types": None}
"""GLM-only features a non-glm5_next config.json does not mention: it has none of them, so the
schema's GLM defaults (288 experts, 4 mHC streams, clamped SwiGLU) must not stand in, nor may
a descriptor's GLM layer schedules (null = the model type's own: every layer full attention, dense)."""

HF_FIELD_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "qwen3_moe": {"n_routed_experts": ("num_experts", "num_local_experts")},
    "qwen2_moe": {"n_routed_experts": ("num_experts", "num_local_experts")},
}
"""model.arch fields a model type's config.json names otherwise (GLM's names are the schema's), by
the names it may be written under: the released checkpoints' first; transformers 5.25 writes the
second (its attribute_map). The hf backends build the config under the first (workers/hf/model.py)."""
SPARSE_STEP_TYPES = ("qwen3_moe", "qwen2_moe")
"""MoE types whose config.json places the routed experts by `decoder_sparse_step` and
`mlp_only_layers` instead of a per-layer list."""

NULL_MEANS_HF_DEFAULT = frozenset({"layer_types", "mlp_layer_types", "indexer_types", "head_dim"})
"""Fields whose null in model.arch means "whatever HF derives": a declared null claims nothing
about the checkpoint (which always writes the derived schedule out), so it never disagrees."""

_HINTS = typing.get_type_hints(ArchConfig)
ARCH_FIELDS = tuple(f.name for f in dataclasses.fields(ArchConfig))


class ModelFolderError(Exception):
    """A model folder file that is missing or unreadable; `path` names it."""

    def __init__(self, path: Path, problem: str):
        super().__init__(f"{path} {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class CheckpointArch:
    """The architecture config.json states, in ArchConfig's field names."""

    config_file: Path
    model_type: Any
    """config.json's top-level model_type, as written (may be missing or not a string)."""
    values: dict[str, Any]
    """ArchConfig field -> the folder's value (only values that fit the field's type)."""
    implied: frozenset[str]
    """Fields in `values` that config.json leaves out because the model type has no such feature."""
    wrong_type: dict[str, Any]
    """ArchConfig field -> a config.json value that does not fit the field's type (not applied)."""
    section: str
    """Where the text fields were read: "text_config" (glm5_next) or "" (top level)."""


def _stamp(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _load_json(path: Path, stamp: tuple | None) -> Any:
    """Parsed JSON of one file, memoised per (path, mtime, size): mesh search checks thousands of
    points of one model folder, and a large model's weight index is megabytes."""
    if stamp is None or not path.is_file():
        raise ModelFolderError(path, "does not exist")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelFolderError(path, f"is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFolderError(path, f"cannot be read: {exc}") from None


def load_json(path: Path) -> Any:
    return _load_json(path, _stamp(path))


def _fits(value: Any, tp: Any) -> bool:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is typing.Union:
        return value is None or any(_fits(value, a) for a in args if a is not type(None))
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typing.get_origin(tp) is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    return isinstance(value, tp)


def field_type(field: str) -> str:
    """`int`, `float or null`, `list of str or null`: the ArchConfig type a config.json value must fit."""
    return type_name(_HINTS[field])


def read_arch(folder: str | Path) -> CheckpointArch:
    """The model folder's architecture; raises ModelFolderError for a missing or malformed config.json."""
    config_file = Path(folder) / CONFIG_FILE
    raw = load_json(config_file)
    if not isinstance(raw, dict):
        raise ModelFolderError(config_file, f"holds a JSON {type(raw).__name__}, not an object of config fields")
    model_type = raw.get("model_type")
    text, section = raw, ""
    if model_type == GLM5_NEXT and "text_config" in raw:
        text, section = raw["text_config"], "text_config"
        if not isinstance(text, dict):
            raise ModelFolderError(config_file, f"has text_config of type {type(text).__name__}, not an object")
    values: dict[str, Any] = {}
    wrong: dict[str, Any] = {}
    for name in ARCH_FIELDS:
        if name == "model_type":
            value, present = model_type, "model_type" in raw
        elif name == "tie_word_embeddings" and name in raw:
            value, present = raw[name], True  # the top-level flag is what HF ties the lm_head by
        elif isinstance(model_type, str) and name in HF_FIELD_NAMES.get(model_type, {}):
            value, present = _renamed(text, model_type, HF_FIELD_NAMES[model_type][name])
        else:
            value, present = text.get(name), name in text
        if present:
            (values if _fits(value, _HINTS[name]) else wrong)[name] = value
    if model_type in SPARSE_STEP_TYPES and isinstance(values.get("num_hidden_layers"), int):
        values["mlp_layer_types"] = _sparse_step_schedule(text, values["num_hidden_layers"],
                                                          values.get("n_routed_experts", 0))
    implied = set()
    if isinstance(model_type, str) and model_type != GLM5_NEXT:
        for name, value in ABSENT_WHEN_NOT_GLM5_NEXT.items():
            if name not in values and name not in wrong:
                values[name] = value
                implied.add(name)
    return CheckpointArch(config_file=config_file, model_type=model_type, values=values, implied=frozenset(implied),
                          wrong_type=wrong, section=section)


def _renamed(text: dict, model_type: str, keys: tuple[str, ...]) -> tuple[Any, bool]:
    """(value, present) of a renamed field: save_pretrained leaves out values equal to the config
    class's defaults (a 128-expert Qwen3-MoE's config.json has no num_experts), so an absent one
    is the class default where transformers is installed."""
    for key in keys:
        if key in text:
            return text[key], True
    if importlib.util.find_spec("transformers") is None:
        return None, False
    from transformers import CONFIG_MAPPING

    default = getattr(CONFIG_MAPPING[model_type](), keys[0], None)
    return default, default is not None


def _sparse_step_schedule(text: dict, layers: int, experts: int) -> list[str]:
    """Per layer "sparse" or "dense", as transformers' qwen2/3_moe decoder layer decides: routed
    experts where the layer is not in mlp_only_layers and (index + 1) % decoder_sparse_step == 0."""
    step, dense_only = text.get("decoder_sparse_step", 1) or 1, set(text.get("mlp_only_layers") or ())
    return ["sparse" if experts > 0 and i not in dense_only and (i + 1) % step == 0 else "dense" for i in range(layers)]


def arch_values(folder: str | Path) -> dict[str, Any] | None:
    """ArchConfig field -> the folder's value; None when config.json cannot be read (MODEL003 says why)."""
    try:
        return read_arch(folder).values
    except ModelFolderError:
        return None


def _transformers_models_dir() -> Path | None:
    """transformers' `models/` folder, found without importing transformers (seconds, and torch)."""
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "models"


def trainer_builds(backend: str, model_type: Any) -> bool:
    """Whether trainer.backend `backend` can build a model folder of `model_type`."""
    if not isinstance(model_type, str) or not model_type:
        return False
    if backend == "megatron":
        return model_type in MEGATRON_MODEL_TYPES
    if model_type in HF_MODEL_TYPES:
        return True
    models = _transformers_models_dir()
    return models is not None and (models / model_type.replace("-", "_")).is_dir()


def weight_problems(folder: str | Path) -> list[tuple[Path, str]]:
    """(file, what is wrong) for the weights: the index (or the single file) and every shard it names."""
    folder = Path(folder)
    index_file = folder / INDEX_FILE
    if not index_file.is_file():
        if (folder / SINGLE_FILE).is_file():
            return []
        return [(index_file, f"does not exist (nor does a single {SINGLE_FILE})")]
    try:
        index = load_json(index_file)
    except ModelFolderError as err:
        return [(err.path, err.problem)]
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        return [(index_file, "has no weight_map (tensor name -> shard file)")]
    shards = sorted({str(v) for v in weight_map.values()})
    missing = [s for s in shards if not (folder / s).is_file()]
    if not missing:
        return []
    shown = ", ".join(missing[:8]) + (f" (+{len(missing) - 8} more)" if len(missing) > 8 else "")
    return [(index_file, f"names {len(missing)} of {len(shards)} shard files that are missing: {shown}")]
