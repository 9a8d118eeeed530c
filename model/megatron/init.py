"""Random initialisation with HF glm5_next's rules (Glm5NextPreTrainedModel._init_weights),
applied shard by shard, for runs without a checkpoint (model.hf_path null).

Matrices ~ N(0, 0.02); norms 1; indexer pool embedding 0 and pool gate 1; mHC base 0,
scale 1; KDA A_log 0 with a lower-bounded gate (log U(1, 16) without) and dt_bias the
inverse softplus of a log-uniform step in [1e-3, 1e-1]. Each rank draws from its own
generator seeded by (seed, rank coordinates), so shards differ but runs repeat. Values are
drawn on the model's device (a CUDA generator on GPU): a CPU generator filled the 24B
weights of the 4-layer slice at CPU speed, minutes before the first step.
"""
import math

import torch

from model.megatron.mhc import HyperConnection
from model.megatron.rmsnorm import RMSNorm

STD = 0.02


def _dt_bias(param: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    low, high = math.log(1e-3), math.log(1e-1)
    step = (torch.rand(param.shape, generator=gen, device=gen.device) * (high - low) + low).exp().clamp_min(1e-4)
    return step + torch.log(-torch.expm1(-step))


def _value(name: str, param: torch.Tensor, lower_bound: float | None, gen: torch.Generator) -> torch.Tensor:
    leaf = name.rsplit(".", 1)[-1]
    if name.endswith("kpool_ape") or name.endswith("k_norm.bias") or leaf in ("base", "expert_bias"):
        return torch.zeros(param.shape, device=gen.device)
    if name.endswith("kpool_gate") or name.endswith("k_norm.weight") or leaf in ("scale", "o_norm"):
        return torch.ones(param.shape, device=gen.device)
    if leaf == "A_log":
        if lower_bound is not None:
            return torch.zeros(param.shape, device=gen.device)
        return torch.empty(param.shape, device=gen.device).uniform_(1, 16, generator=gen).log()
    if leaf == "dt_bias":
        return _dt_bias(param, gen)
    return torch.randn(param.shape, generator=gen, device=gen.device) * STD


def init_weights(model: torch.nn.Module, seed: int, rank_key: int) -> None:
    """Fill every parameter and buffer of `model` in place (see the module docstring)."""
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + rank_key)
    norms = {id(m.weight) for m in model.modules() if isinstance(m, RMSNorm)}
    hc_fn = {id(m.fn) for m in model.modules() if isinstance(m, HyperConnection)}
    lower_bound = model.spec.linear_lower_bound
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if id(tensor) in norms:
                tensor.fill_(1.0)
            elif id(tensor) in hc_fn:
                tensor.copy_(torch.randn(tensor.shape, generator=gen, device=device) * STD)
            else:
                tensor.copy_(_value(name, tensor, lower_bound, gen))
