"""The optimizer's part of a Megatron trainer checkpoint: reading and preparing Adam state.

A ChainedOptimizer holds one DistributedOptimizer for dense and one for expert parameters;
each keeps, per parameter this rank owns a range of, a 1-D shard of the fp32 master and of
Adam's moments (checkpoint.py writes them as chunks of the whole tensor). Without a
distributed optimizer (CPU AdamW) the states are whole local slices in optimizer.state.
"""
import torch

from launcher.contract.errors import CheckpointError


def is_distributed(optimizer) -> bool:
    return bool(distributed_parts(optimizer))


def distributed_parts(optimizer):
    """Megatron's DistributedOptimizers inside `optimizer` (a ChainedOptimizer holds one for
    dense and one for expert parameters)."""
    return [o for o in getattr(optimizer, "chained_optimizers", [optimizer]) if hasattr(o, "shard_fp32_from_float16_groups")]


def _owned(part):
    """(model param, the inner optimizer's param for it, is_host_optimizer) for each
    parameter this rank owns a range of. Read from the parallel lists megatron-core keeps
    (model_*_groups and their shards), not from model_param_group_index_map: in 0.19.2 that
    map counts positions in buffer order while the inner optimizer's groups list the fp32
    shards first, so in a group mixing fp32 and bf16 weights it points at another parameter
    (megatron-core's own load_state_dict then gives a state the wrong size: the "6144 vs
    512" crash inside Adam)."""
    hybrid = hasattr(part.optimizer, "sub_optimizers")  # HybridDeviceOptimizer (cpu_offload)
    if part.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8 and not hybrid:
        raise NotImplementedError("checkpoints of megatron-core's precision-aware optimizer on the GPU (no host "
                                  "offload): its states are scaled copies; not used by this trainer")
    for g in range(len(part.model_float16_groups)):
        rows = [*zip(part.model_fp32_groups[g], part.shard_fp32_groups[g], part.shard_fp32_groups[g], strict=True),
                *zip(part.model_float16_groups[g], part.shard_float16_groups[g], part.shard_fp32_from_float16_groups[g],
                     strict=True)]
        for model_param, shard, main in rows:
            yield model_param, (shard if hybrid else main), hybrid


def distributed_states(part):
    """(param, start, {state key: this rank's 1-D shard}) per parameter this rank owns a
    range of: fp32_param (the master), exp_avg, exp_avg_sq (Adam's state tensors)."""
    for param, inner, hybrid in _owned(part):
        span = part._get_model_param_range_map(param)["param"]
        state = part.optimizer.state[inner]
        states = {"fp32_param": state["master_param"] if hybrid else inner}
        states.update({k: v for k, v in state.items() if k not in ("step", "master_param") and torch.is_tensor(v)})
        for key, value in states.items():
            if value.numel() != span.end - span.start:
                raise CheckpointError(f"distributed optimizer: {key} of a parameter of shape {tuple(param.shape)} has "
                                      f"{value.numel()} elements, its range [{span.start}, {span.end}) has "
                                      f"{span.end - span.start}")
        yield param, span.start, states


def _step_of(states) -> int:
    steps = {int(s["step"]) for s in states if "step" in s}
    if len(steps) > 1:
        raise CheckpointError(f"optimizer steps differ between parameters ({sorted(steps)}): cannot store one step")
    return steps.pop() if steps else 0


def optimizer_step(optimizer) -> int:
    if is_distributed(optimizer):
        return max([_step_of(p.optimizer.state.values()) for p in distributed_parts(optimizer)], default=0)
    return _step_of(optimizer.state.values())


def prepare_distributed(optimizer, step: int, state_keys: set[str]) -> None:
    """Give every owned parameter its Adam state (`state_keys`) and set the step, in place
    where it exists. The host optimizer (cpu_offload) gets its states from one dummy step
    (megatron-core's HybridDeviceOptimizer.dummy_step), which also writes the model
    weights: they are loaded after this."""
    for part in distributed_parts(optimizer):
        inner = part.optimizer
        if hasattr(inner, "sub_optimizers"):
            if not any(inner.state.values()):
                inner.dummy_step()
            for _, key, _ in _owned(part):
                inner.state[key]["step"].fill_(step)  # shared with its CPU sub-optimizer
            continue
        groups = {id(p): g for g in inner.param_groups for p in g["params"]}
        for _, main, _ in _owned(part):
            state = inner.state[main]
            on_device = groups[id(main)].get("capturable") or groups[id(main)].get("fused")
            state["step"] = torch.tensor(float(step), device=main.device if on_device else "cpu")
            for key in state_keys:
                if key not in state:
                    state[key] = torch.zeros_like(main, memory_format=torch.preserve_format)
