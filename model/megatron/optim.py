"""Megatron's DDP + distributed optimizer around a GlmModel, and one training step.

The grad buffers, the TP sum of duplicated weights' partial grads (finalize_model_grads
reads the `sequence_parallel` attribute), expert grads reduced over the expert-data-parallel
group (`allreduce = False`), fp32 master weights and Adam states sharded over DP: all
megatron-core's. A minimal TransformerConfig carries the mesh for them. megatron-core has
no ETP counterpart of the TP sum: the partial grads of expert LoRA halves that every ETP
rank holds whole (`etp_duplicated`) are summed here.
"""
from collections.abc import Callable

import torch
from megatron.core import parallel_state as ps
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
from megatron.core.transformer.transformer_config import TransformerConfig
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

from model.megatron.spec import ModelSpec


def megatron_config(spec: ModelSpec) -> TransformerConfig:
    tp = ps.get_tensor_model_parallel_world_size()
    return TransformerConfig(
        num_layers=spec.num_hidden_layers, hidden_size=spec.hidden_size, num_attention_heads=spec.num_attention_heads,
        tensor_model_parallel_size=tp, sequence_parallel=tp > 1,
        expert_model_parallel_size=ps.get_expert_model_parallel_world_size(),
        expert_tensor_parallel_size=ps.get_expert_tensor_parallel_world_size(),
        num_moe_experts=spec.n_routed_experts, moe_ffn_hidden_size=spec.moe_intermediate_size,
        add_bias_linear=False, bf16=spec.dtype == torch.bfloat16, params_dtype=spec.dtype)


HOST_OPTIMIZER = {"optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0,
                  "use_precision_aware_optimizer": True}
"""Adam states and fp32 master weights on the host (the planner's 12 B/param). megatron-core's
offload fraction defaults to 0, which offloads nothing; without the precision-aware
optimizer the fp32 master shard would stay on the GPU."""


def wrap_for_training(model: torch.nn.Module, lr: float, weight_decay: float, grad_clip: float,
                      cpu_offload: bool = False) -> tuple[DistributedDataParallel, object]:
    """(ddp_model, optimizer) with the distributed optimizer (fp32 main params and states)."""
    config = megatron_config(model.spec)
    ddp_config = DistributedDataParallelConfig(use_distributed_optimizer=True, grad_reduce_in_fp32=True)
    ddp = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    opt_config = OptimizerConfig(optimizer="adam", lr=lr, weight_decay=weight_decay, clip_grad=grad_clip,
                                 bf16=config.bf16, params_dtype=model.spec.dtype, use_distributed_optimizer=True,
                                 **(HOST_OPTIMIZER if cpu_offload else {}))
    return ddp, get_megatron_optimizer(opt_config, [ddp])


def sum_grads_without_ddp(model: torch.nn.Module) -> None:
    """What DDP + finalize_model_grads do, as sums, for a model Megatron's DDP cannot wrap
    (CPU): TP-duplicated weights over TP, experts over expert-DP, the rest over DP."""
    tp_group, dp_group, edp_group = (ps.get_tensor_model_parallel_group(), ps.get_data_parallel_group(),
                                     ps.get_expert_data_parallel_group())
    for param in model.parameters():
        if param.grad is None:
            continue
        if getattr(param, "sequence_parallel", False):
            torch.distributed.all_reduce(param.grad, group=tp_group)
        expert = getattr(param, "allreduce", True) is False
        torch.distributed.all_reduce(param.grad, group=edp_group if expert else dp_group)
    sum_etp_duplicated_grads(model, "grad")


def clip_grads_over_mesh(model: torch.nn.Module, max_norm: float) -> float:
    """The gradient norm over the whole mesh, and clipping by it, for the CPU path (after
    sum_grads_without_ddp). megatron-core's get_grad_norm_fp32 and clip_grad_by_total_norm_fp32
    allocate on CUDA, so this sums with torch's: each tensor once over the mesh,
    the squares summed over TP (dense) and over EP x ETP (experts), the same total on every
    rank. `max_norm` 0 (trainer.optimizer.grad_clip) only measures it."""
    params = [p for p in model.parameters() if p.requires_grad and p.grad is not None]
    dense_sq, expert_sq = _squared_norm_shares(params)
    torch.distributed.all_reduce(dense_sq, group=ps.get_tensor_model_parallel_group())
    torch.distributed.all_reduce(expert_sq, group=ps.get_expert_tensor_and_model_parallel_group())
    total = (dense_sq + expert_sq).sqrt()
    if max_norm > 0:
        clip_grads_with_norm_(params, max_norm, total)
    return float(total)


def _squared_norm_shares(params: list[torch.nn.Parameter]) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of the squared norm: (dense, expert). megatron-core's duplicate filter
    decides what counts here: a tensor split over ranks on each; one held whole on every TP
    rank (norms, router) on TP rank 0, an expert tensor whole on every ETP rank (an
    `etp_duplicated` LoRA half) on ETP rank 0."""
    tp_group, etp_group = ps.get_tensor_model_parallel_group(), ps.get_expert_tensor_parallel_group()
    dense, expert = [], []
    for param in params:
        if param_is_not_tensor_parallel_duplicate(param, tp_group, etp_group):
            (expert if getattr(param, "allreduce", True) is False else dense).append(param.grad)
    return _sum_of_squares(dense), _sum_of_squares(expert)


def _sum_of_squares(grads: list[torch.Tensor]) -> torch.Tensor:
    return get_total_norm(grads).double() ** 2 if grads else torch.zeros((), dtype=torch.float64)


def sum_etp_duplicated_grads(model: torch.nn.Module, grad_attr: str) -> None:
    """Sum the partial grads (`grad_attr`: main_grad under DDP) of ETP-duplicated params over
    the ETP group, in one collective. After DDP's reduce-scatter only each rank's optimizer
    shard is reduced, but ETP peers share an expert-data-parallel rank, so their shards line up."""
    grads = [getattr(p, grad_attr) for p in model.parameters()
             if getattr(p, "etp_duplicated", False) and getattr(p, grad_attr, None) is not None]
    if not grads:
        return
    flat = _flatten_dense_tensors(grads)
    torch.distributed.all_reduce(flat, group=ps.get_expert_tensor_parallel_group())
    for grad, summed in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
        grad.copy_(summed)


def reduce_grads(ddp: DistributedDataParallel) -> None:
    """Every grad reduction before the optimizer step: megatron-core's, then the ETP sum."""
    finalize_model_grads([ddp])
    sum_etp_duplicated_grads(ddp.module, "main_grad")


def train_step(ddp: DistributedDataParallel, optimizer, micro_losses: list[Callable[[], torch.Tensor]]) -> dict:
    """Accumulate grads over micro-batch loss closures, sync them, take one optimizer step."""
    ddp.zero_grad_buffer()
    optimizer.zero_grad()
    total = 0.0
    for loss_fn in micro_losses:
        loss = loss_fn()
        loss.backward()
        total += loss.item()
    reduce_grads(ddp)
    updated, grad_norm, _ = optimizer.step()
    return {"loss": total, "grad_norm": float(grad_norm or 0.0), "updated": bool(updated)}
