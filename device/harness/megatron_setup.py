"""Shared setup for the Megatron GPU checks: process group, HF reference on the GPU, the
Megatron model loaded from it, and the LoRA-gradient expectation (B = 0 form).

Used by the Megatron benchmarks and tests/gpu; run on the device
with PYTHONPATH=. (the device machine has no editable install).
"""
import os
import tempfile

import torch
import torch.distributed as dist

DOMAIN_LORA_TARGETS = ["linear_q_down_proj", "linear_q_up_proj", "linear_kv_down_proj", "linear_kv_up_proj",
                       "linear_proj", "linear_fc1", "linear_fc2", "q_proj", "k_proj", "v_proj", "b_proj",
                       "f_a_proj", "g_a_proj", "o_proj"]


def init_distributed(tp: int = 1, ep: int = 1, etp: int = 1, device_type: str = "cuda") -> torch.device:
    """Process group from torchrun's env (or a group of one) + Megatron's TP/EP/ETP groups.

    device_type "cpu" runs the same code over gloo: the benchmarks' smoke test on a laptop."""
    from model.megatron.build import init_parallel

    backend = "nccl" if device_type == "cuda" else "gloo"
    if not dist.is_initialized():
        if "RANK" in os.environ:
            dist.init_process_group(backend)
        else:
            store = tempfile.NamedTemporaryFile(prefix=f"{backend}-", delete=False).name
            dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1)
    if device_type == "cpu":
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    init_parallel(tp, ep, etp)
    return device


def build_hf_on_gpu(model_cfg, seed: int, device: torch.device):
    """HF glm5_next (tiny vision tower) initialised directly on the GPU in model.dtype."""
    from transformers.models.glm5_next import Glm5NextForConditionalGeneration

    from launcher.workers.hf.model import VISION_PREFIX, hf_config

    torch.manual_seed(seed)
    dtype = getattr(torch, getattr(model_cfg.dtype, "value", model_cfg.dtype))
    with torch.device(device):
        model = Glm5NextForConditionalGeneration._from_config(hf_config(model_cfg.arch, pad_id=0), dtype=dtype)
    for name, param in model.named_parameters():
        param.requires_grad_(not name.startswith(VISION_PREFIX))
    return model


def perturb_for_signal(hf, seed: int) -> None:
    """Move weights HF initialises to constants (mHC base, k-pool gate/ape) off them."""
    gen = torch.Generator(device=next(hf.parameters()).device).manual_seed(seed)
    with torch.no_grad():
        for name, param in hf.named_parameters():
            if any(k in name for k in ("hc.base", "kpool_compress")):
                noise = torch.randn(param.shape, generator=gen, device=param.device, dtype=torch.float32)
                param.add_((noise * 0.5).to(param.dtype))


def megatron_from_hf_model(hf, model_cfg, device: torch.device):
    from launcher.workers.hf.model import checkpoint_state
    from model.megatron.build import build_model
    from model.megatron.spec import ModelSpec
    from model.megatron.weights import load_hf_state

    meg = build_model(ModelSpec.from_arch(model_cfg.arch, model_cfg.dtype, pad_token_id=0), device)
    load_hf_state(meg, checkpoint_state(hf))
    return meg


def hf_grads(hf) -> dict[str, torch.Tensor]:
    """Every weight's grad (zeros where none) under the checkpoint's names."""
    from launcher.workers.hf.model import checkpoint_state

    grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in hf.named_parameters()}
    grads.update({n: torch.zeros_like(b) for n, b in hf.named_buffers()})
    return checkpoint_state(hf, grads)


def expected_b_grads(spec, grads: dict[str, torch.Tensor], targets: list[str], rank: int, expert_rank: int,
                     alpha: float, seed: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """With lora_B = 0 the model is unchanged and dL/dB = s G A^T: ({name.lora_A: A}, {name.lora_B: dB})."""
    from model.megatron.mapping import megatron_from_hf

    full_G = megatron_from_hf(grads, spec)
    gen = torch.Generator(device=next(iter(grads.values())).device).manual_seed(seed)
    a_values, b_grads = {}, {}
    for wname, grad in full_G.items():
        module = wname.rsplit(".", 1)[0]
        if not wname.endswith(".weight") or module.rsplit(".", 1)[-1] not in targets:
            continue
        r = expert_rank if grad.dim() == 3 else rank
        a = torch.randn(*grad.shape[:-2], r, grad.shape[-1], generator=gen, device=grad.device) * grad.shape[-1] ** -0.5
        a = a.to(grad.dtype)
        a_values[f"{module}.lora_A"] = a
        b_grads[f"{module}.lora_B"] = (alpha / r) * (grad.float() @ a.float().transpose(-1, -2))
    return a_values, b_grads
