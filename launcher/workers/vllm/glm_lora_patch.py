"""vllm#56327 (open; the pinned 0.32 lacks it) as a guarded runtime patch: LoRA adapters on
GLM-5.3-Flash's fused KDA and MLA projections.

What 0.32 does without it (read in its source):
- Glm5NextForConditionalGeneration.packed_modules_mapping names only gate_up_proj. The LoRA
  worker expects the adapter's modules to be the model's linear suffixes with each packed
  runtime name expanded to its parts (worker_manager._load_adapter), so an adapter on
  q_proj, f_a_proj, q_a_proj, ... is refused at add_lora: the runtime holds them fused as
  KDA's in_proj_qkvbfg_a (q, k, v, b, f_a, g_a), MLA's fused_qkv_a_proj (q_a,
  kv_a_proj_with_mqa) and the DSA indexer's wk_weights_proj (wk, weights_proj), the shard
  order of Glm5NextModel.load_weights' stacked_params_mapping.
- in_proj_qkvbfg_a keeps f_a and g_a whole on every TP rank (its base layer's
  `replicated_shard_ids`, kda.py), but MergedColumnParallelLinearWithLoRA.slice_lora_b cuts
  every LoRA-B by tp_rank: at TP > 1 rank r > 0 takes rows [r*d, (r+1)*d) of a d-row B, i.e.
  none, and serves f_a / g_a without their adapter. The patch keeps those B's whole.
- f_b_proj / g_b_proj take f_a / g_a, column slices of that projection's output, so the
  triton shrink must make its input contiguous; 0.32's `_lora_shrink` already does.

Each part is applied only where the installed vLLM lacks it, read off the class or function
itself (never the version string), and applying twice changes nothing. The engine applies
it before it builds the LLM; TP > 1 Ray workers apply it when worker.py is imported (PATCH_ENV).
"""
import inspect
import logging

log = logging.getLogger(__name__)

PATCH_ENV = "LAUNCHER_GLM_LORA_PATCH"
"""Set to "1" by the engine; vLLM's Ray executor copies it to its TP workers."""

GLM_PACKED_MODULES = {
    "in_proj_qkvbfg_a": ["q_proj", "k_proj", "v_proj", "b_proj", "f_a_proj", "g_a_proj"],
    "fused_qkv_a_proj": ["q_a_proj", "kv_a_proj_with_mqa"],
    "wk_weights_proj": ["wk", "weights_proj"],
}
"""Fused runtime module -> the checkpoint (and PEFT adapter) modules it packs, in shard order."""


def add_packed_modules(model_cls) -> list[str]:
    """Give `model_cls` the GLM_PACKED_MODULES entries it lacks; returns the names added.

    A class of its own dict, not the inherited one mutated (Glm4v's is shared). An entry
    present with other parts means vLLM changed the fused layout: fail rather than guess."""
    mapping = dict(getattr(model_cls, "packed_modules_mapping", {}))
    for name, parts in GLM_PACKED_MODULES.items():
        if name in mapping and list(mapping[name]) != parts:
            raise RuntimeError(f"{model_cls.__name__}.packed_modules_mapping[{name!r}] is {mapping[name]}, the GLM "
                               f"LoRA patch (vllm#56327) expects {parts}: the installed vLLM changed the fused layout; "
                               "re-check launcher/workers/vllm/glm_lora_patch.py against it")
    added = [name for name in GLM_PACKED_MODULES if name not in mapping]
    if added:
        model_cls.packed_modules_mapping = {**mapping, **{name: list(GLM_PACKED_MODULES[name]) for name in added}}
    return added


def _names(fn) -> set:
    """The attribute names and string constants in the bytecode of `fn` (decorators unwrapped)."""
    code = inspect.unwrap(fn).__code__
    return {*code.co_names, *(c for c in code.co_consts if isinstance(c, str))}


def _reads(cls, attribute: str) -> bool:
    """Whether any method defined on `cls` reads `attribute` (`.attribute` or getattr)."""
    return any(attribute in _names(fn) for fn in vars(cls).values() if inspect.isfunction(fn))


def keep_replicated_lora_b(lora_cls) -> bool:
    """Make `lora_cls.slice_lora_b` leave the LoRA-B of the base layer's replicated shards
    whole; False (nothing done) when the class already reads replicated_shard_ids."""
    if _reads(lora_cls, "replicated_shard_ids"):
        return False
    sliced_by_rank = lora_cls.slice_lora_b

    def slice_lora_b(self, lora_b):
        sliced = sliced_by_rank(self, lora_b)
        for shard in getattr(self.base_layer, "replicated_shard_ids", ()):
            sliced[shard] = lora_b[shard]
        return sliced

    lora_cls.slice_lora_b = slice_lora_b
    return True


def contiguous_shrink_input(punica_cls, shrink_fn) -> bool:
    """Make `punica_cls.add_shrink` pass a contiguous input; False (nothing done) when
    `shrink_fn` (the triton op) or add_shrink already makes it contiguous."""
    if any("contiguous" in _names(fn) for fn in (shrink_fn, punica_cls.add_shrink)):
        return False
    shrink = punica_cls.add_shrink

    def add_shrink(self, y, x, *args, **kwargs):
        return shrink(self, y, x.contiguous(), *args, **kwargs)

    punica_cls.add_shrink = add_shrink
    return True


def apply_glm_lora_patch() -> dict[str, list[str]]:
    """Patch the installed vLLM where it lacks a part of vllm#56327; logs one debug line.

    Returns {"applied": [...], "present": [...]} naming each part."""
    from vllm.lora.layers.column_parallel_linear import MergedColumnParallelLinearWithLoRA
    from vllm.lora.ops.triton_ops.lora_shrink_op import _lora_shrink
    from vllm.lora.punica_wrapper.punica_gpu import PunicaWrapperGPU
    from vllm.models.glm5next.common.model import Glm5NextForConditionalGeneration

    added = add_packed_modules(Glm5NextForConditionalGeneration)
    parts = {f"packed modules {', '.join(added or GLM_PACKED_MODULES)}": bool(added),
             "replicated LoRA-B shards": keep_replicated_lora_b(MergedColumnParallelLinearWithLoRA),
             "contiguous shrink input": contiguous_shrink_input(PunicaWrapperGPU, _lora_shrink)}
    result = {"applied": [p for p, done in parts.items() if done], "present": [p for p, done in parts.items() if not done]}
    log.debug("GLM LoRA patch (vllm#56327): applied %s; already in the installed vLLM: %s",
              ", ".join(result["applied"]) or "nothing", ", ".join(result["present"]) or "nothing")
    return result
