"""Model-level rules: trainable parts, HF constraints, the checkpoint folder and its config."""
from pathlib import Path

from launcher.config.model_folder import (
    CONFIG_FILE,
    INDEX_FILE,
    ModelFolderError,
    field_type,
    read_arch,
    trainer_builds,
    weight_problems,
)
from launcher.plan.arch import DSA, KDA
from launcher.validate.registry import error, rule


@rule("MODEL001")
def language_model_only(cfg, plan):
    """The vision tower is never trained."""
    if not cfg.model.language_model_only:
        yield error("model.language_model_only", "model.language_model_only=false",
                    "The trainer backends build and train the language model only; the vision tower has no "
                    "Megatron implementation here.", "Set model.language_model_only=true.")


@rule("MODEL002")
def nope_mla(cfg, plan):
    """glm5_next MLA has no rotary part."""
    a = cfg.model.arch
    if plan.arch.is_glm5_next and a.qk_rope_head_dim > 0:
        yield error("model.arch.qk_rope_head_dim", f"model.arch.qk_rope_head_dim={a.qk_rope_head_dim}",
                    "GLM-5.3-Flash attention is NoPE; HF glm5_next rejects a rotary width.",
                    "Set model.arch.qk_rope_head_dim=0.")


@rule("MODEL003")
def hf_checkpoint_loads(cfg, plan):
    """model.hf_path is a checkpoint the trainer can load: config.json, a model type it builds, every weight file."""
    path = cfg.model.hf_path
    if path is None:
        return
    if not Path(path).is_dir():
        yield _ckpt_error(f"model.hf_path={path} does not exist (no folder, so no {CONFIG_FILE})")
        return
    yield from _config_problems(path, cfg.trainer.backend.value)
    for file, problem in weight_problems(path):
        yield _ckpt_error(f"{file} {problem}", "The trainer reads its weight slices from the shards the index names.",
                          f"Point model.hf_path at a complete checkpoint (save_pretrained writes {INDEX_FILE} and "
                          "every shard), or copy the missing files into it.")


def _ckpt_error(message: str, why: str = "The trainer loads the architecture and weights from that folder.",
                fix: str = "Point model.hf_path at a local HF checkpoint folder, or null for random init."):
    return error("model.hf_path", message, why, fix)


def _config_problems(path: str, backend: str):
    try:
        ckpt = read_arch(path)
    except ModelFolderError as err:
        yield _ckpt_error(f"{err.path} {err.problem}", "With model.hf_path set, the checkpoint's config.json is the "
                          "architecture: nothing can be planned or built without it.",
                          f"Restore {err.path.name} (save_pretrained writes it), or set model.hf_path=null for "
                          "random init from model.arch.")
        return
    if not trainer_builds(backend, ckpt.model_type):
        if backend == "megatron":
            builds, fix = ("only glm5_next (the project's Megatron GLM-5.3-Flash in model/megatron)",
                           "Use a glm5_next checkpoint, or trainer.backend=hf for another transformers causal LM.")
        else:
            builds, fix = ("glm5_next or a model type transformers knows (AutoModelForCausalLM)",
                           "Use a checkpoint whose config.json names a transformers model_type (e.g. qwen3).")
        yield _ckpt_error(f"{ckpt.config_file} has model_type={ckpt.model_type!r}, which trainer.backend={backend} "
                          "cannot build", f"The {backend} trainer builds {builds}.", fix)
    for name, value in ckpt.wrong_type.items():
        where = f"{ckpt.section}.{name}" if ckpt.section else name
        yield _ckpt_error(f"{ckpt.config_file} has {where}={value!r}, not {field_type(name)}",
                          f"model.arch.{name} is taken from config.json and must have the schema's type.",
                          f"Fix {where} in {ckpt.config_file}.")


@rule("MODEL004")
def layer_schedules(cfg, plan):
    """layer_types, mlp_layer_types and indexer_types have one known entry per layer."""
    a = cfg.model.arch
    f = plan.arch
    schedules = [("layer_types", f.layer_types, (KDA, DSA, "full_attention")),
                 ("mlp_layer_types", f.mlp_layer_types, ("dense", "sparse"))]
    if a.indexer_types is not None:
        schedules.append(("indexer_types", tuple(a.indexer_types), ("full", "shared")))
    for name, values, known in schedules:
        if len(values) != a.num_hidden_layers or not set(values) <= set(known):
            yield error(f"model.arch.{name}",
                        f"model.arch.{name} has {len(values)} entries {sorted(set(values))} for "
                        f"{a.num_hidden_layers} layers",
                        "Each layer needs exactly one schedule entry from the known kinds.",
                        f"Give {a.num_hidden_layers} entries from {list(known)}, or null for the default.")


@rule("MODEL005")
def shared_indexer_follows_full(cfg, plan):
    """A 'shared' DSA layer reuses the top-k of the layer right before it, which must be a
    DSA layer with its own indexer (HF raises mid-forward otherwise)."""
    a, layer_types = cfg.model.arch, plan.arch.layer_types
    kinds = tuple(a.indexer_types or ())
    if len(kinds) != len(layer_types):
        return
    for i, kind in enumerate(kinds):
        if kind != "shared" or layer_types[i] != DSA:
            continue
        if i == 0 or layer_types[i - 1] != DSA or kinds[i - 1] != "full":
            before = "no layer" if i == 0 else f"layer {i - 1} ({layer_types[i - 1]}, indexer {kinds[i - 1]})"
            yield error("model.arch.indexer_types",
                        f"model.arch.indexer_types[{i}]=shared follows {before}",
                        "A shared indexer layer attends with the selection of the layer right before it, so that "
                        "layer must be indexed_attention with a 'full' indexer.",
                        f"Set model.arch.indexer_types[{i}]=full, or make layer {i - 1} an indexed_attention "
                        "layer with indexer 'full'.")


@rule("MODEL006")
def arch_matches_checkpoint(cfg, plan):
    """With model.hf_path set, a model.arch value the descriptor, recipe or command line sets agrees with config.json."""
    m = cfg.model
    if m.hf_path is None or not m.declared_arch:
        return
    differ = {name: (value, getattr(m.arch, name)) for name, value in m.declared_arch.items()
              if value != getattr(m.arch, name)}
    if not differ:
        return
    try:
        ckpt = read_arch(m.hf_path)
    except ModelFolderError:
        return  # MODEL003 names the file; nothing was taken from it
    implied = {name: f" (config.json has no {name}: {ckpt.model_type} has none)" for name in ckpt.implied}
    listed = "; ".join(f"{name}: descriptor {mine!r} vs checkpoint {theirs!r}{implied.get(name, '')}"
                       for name, (mine, theirs) in differ.items())
    names = ", ".join(differ)
    yield error(f"model.arch.{next(iter(differ))}" if len(differ) == 1 else "model.arch",
                f"model.arch disagrees with {ckpt.config_file} in {len(differ)} field(s): {listed}",
                "With model.hf_path set, the checkpoint's config.json is the architecture: the trainer and the "
                "engines build its shapes, so the plan and every rule use its values; a different model.arch "
                "value would describe a model that is not the one trained.",
                f"Remove {names} from model.arch (descriptor model.name={m.name}, the recipe or the command line) "
                "or use a descriptor without arch; the checkpoint's config is the architecture.")
