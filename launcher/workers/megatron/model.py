"""Build the Megatron GLM-5.3-Flash for a trainer rank: parallel state, model, weights, LoRA,
optimizer (Megatron DDP + distributed optimizer on GPU; torch AdamW with summed grads on
CPU, where Megatron's grad buffers cannot live).
"""
import torch
from megatron.core import parallel_state as ps

from launcher.workers.progress import Progress
from model.megatron.build import build_model, init_parallel
from model.megatron.init import init_adapters, init_weights
from model.megatron.lora import apply_lora
from model.megatron.optim import wrap_for_training
from model.megatron.spec import ModelSpec
from model.megatron.weights import load_model_folder


def build_rank_model(config, plan, device: torch.device, pad_id: int, progress: Progress | None = None):
    """This rank's model with weights (the model folder's or HF-rule random init, both straight on
    `device`) and LoRA if asked. `plan` gives the mesh (etp resolved there) and the LoRA
    ranks; `progress` gets the start-up phases. The model is built pp=1, cp=1: the validator
    refuses any other mesh for this backend before Ray starts (MESH002, MESH003, MESH013)."""
    progress, mesh = progress or Progress(None, ""), plan.mesh
    progress.phase("model-parallel groups")
    init_parallel(mesh.tp, mesh.ep, mesh.etp)
    progress.phase(f"building model on {device.type}")
    spec = ModelSpec.from_arch(config.model.arch, config.model.dtype, pad_id)
    granularity = config.trainer.recompute.granularity.value
    modules = frozenset(config.trainer.recompute.modules) if granularity == "selective" else frozenset()
    model = build_model(spec, device, recompute_layers=granularity == "full", recompute_modules=modules)
    if config.model.hf_path:
        load_model_folder(model, config.model.hf_path, progress.bytes_reporter("reading checkpoint"))
    else:
        progress.phase(f"random init on {device.type}")
        init_weights(model, config.run.seed)
    lora = config.trainer.lora
    if plan.lora.enabled:
        progress.phase("LoRA adapters")
        apply_lora(model, list(lora.targets), lora.rank, lora.alpha, lora.share_expert_adapters,
                   plan.lora.expert_rank)
        init_adapters(model, config.run.seed)
    release_cached_blocks(device)
    return model


def release_cached_blocks(device: torch.device) -> None:
    """Hand the allocator's cached blocks back to the GPU. Random init draws each tensor in fp32
    first: on the 4-layer slice the stacked expert weights left ~30 GiB cached in the trainer
    (89 GiB reserved for 44 GiB of weights), which the engine on the same GPU then lacked at
    the first sync."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def build_optimizer(model, config, device: torch.device):
    """(model to call, optimizer, uses_megatron_ddp); on CPU grads are summed by
    optim.sum_grads_without_ddp and clipped by optim.clip_grads_over_mesh (Megatron's grad
    buffers and its norm need CUDA), for any tp/ep/etp."""
    opt = config.trainer.optimizer
    if device.type == "cuda":
        ddp, optimizer = wrap_for_training(model, opt.lr, opt.weight_decay, opt.grad_clip, opt.cpu_offload)
        return ddp, optimizer, True
    params = [p for p in model.parameters() if p.requires_grad]
    return model, torch.optim.AdamW(params, lr=opt.lr, weight_decay=opt.weight_decay), False


def data_parallel_size() -> int:
    return ps.get_data_parallel_world_size()
