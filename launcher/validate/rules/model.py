"""Model-level rules: trainable parts, HF constraints, checkpoint path."""
from pathlib import Path

from launcher.plan._arch import DSA, KDA
from launcher.validate.registry import error, rule


@rule("MODEL001")
def language_model_only(cfg, plan):
    """The vision tower is never trained."""
    if not cfg.model.language_model_only:
        yield error("MODEL001", "model.language_model_only", "model.language_model_only=false",
                    "The trainer backends build and train the language model only; the vision tower has no "
                    "Megatron implementation here.", "Set model.language_model_only=true.")


@rule("MODEL002")
def nope_mla(cfg, plan):
    """glm5_next MLA has no rotary part."""
    a = cfg.model.arch
    if plan.arch.is_glm5_next and a.qk_rope_head_dim > 0:
        yield error("MODEL002", "model.arch.qk_rope_head_dim", f"model.arch.qk_rope_head_dim={a.qk_rope_head_dim}",
                    "GLM-5.3-Flash attention is NoPE; HF glm5_next rejects a rotary width.",
                    "Set model.arch.qk_rope_head_dim=0.")


@rule("MODEL003")
def hf_path_exists(cfg, plan):
    """model.hf_path points at a folder with config.json."""
    path = cfg.model.hf_path
    if path is not None and not (Path(path) / "config.json").is_file():
        yield error("MODEL003", "model.hf_path", f"model.hf_path={path} has no config.json",
                    "The trainer loads the architecture and weights from that folder.",
                    "Point model.hf_path at a local HF checkpoint folder, or null for random init.")


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
            yield error("MODEL004", f"model.arch.{name}",
                        f"model.arch.{name} has {len(values)} entries {sorted(set(values))} for "
                        f"{a.num_hidden_layers} layers",
                        "Each layer needs exactly one schedule entry from the known kinds.",
                        f"Give {a.num_hidden_layers} entries from {list(known)}, or null for the default.")


@rule("MODEL005")
def shared_indexer_follows_full(cfg, plan):
    """A 'shared' DSA layer reuses the top-k of the layer right before it, which must be a
    DSA layer with its own indexer (HF raises mid-forward otherwise; so does model.megatron)."""
    a, layer_types = cfg.model.arch, plan.arch.layer_types
    kinds = tuple(a.indexer_types or ())
    if len(kinds) != len(layer_types):
        return
    for i, kind in enumerate(kinds):
        if kind != "shared" or layer_types[i] != DSA:
            continue
        if i == 0 or layer_types[i - 1] != DSA or kinds[i - 1] != "full":
            before = "no layer" if i == 0 else f"layer {i - 1} ({layer_types[i - 1]}, indexer {kinds[i - 1]})"
            yield error("MODEL005", "model.arch.indexer_types",
                        f"model.arch.indexer_types[{i}]=shared follows {before}",
                        "A shared indexer layer attends with the selection of the layer right before it, so that "
                        "layer must be indexed_attention with a 'full' indexer.",
                        f"Set model.arch.indexer_types[{i}]=full, or make layer {i - 1} an indexed_attention "
                        "layer with indexer 'full'.")
