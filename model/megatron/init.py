"""Random initialisation with HF glm5_next's rules (Glm5NextPreTrainedModel._init_weights),
applied shard by shard, for runs without a checkpoint (model.hf_path null).

Matrices ~ N(0, 0.02); norms 1; indexer pool embedding 0 and pool gate 1; mHC base 0,
scale 1; KDA A_log 0 with a lower-bounded gate (log U(1, 16) without) and dt_bias the
inverse softplus of a log-uniform step in [1e-3, 1e-1]; LoRA A ~ N(0, 1/in), B = 0.

Every tensor draws from a generator keyed by its shard coordinates (which TP / EP / ETP
slice of the whole tensor it is; shards.shard_splits): different slices get different
values, and every rank holding the same slice (data-parallel replicas, TP ranks of a
duplicated norm or router, TP ranks of experts when etp = 1) draws the same values, as a
model loaded from one checkpoint would hold. Keyed by rank instead, replicas started out
different and the exported model matched no rank's. Values are drawn on the model's device
(a CPU generator filled the 4-layer slice's 24B weights in minutes).
"""
import math
import zlib

import torch

from model.megatron.mhc import HyperConnection
from model.megatron.rmsnorm import RMSNorm
from model.megatron.shards import shard_of, shard_splits, whole_shape

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


class ShardGenerators:
    """One generator per shard key, each seeded from (seed, key), created on first use."""

    def __init__(self, seed: int, device: torch.device):
        self.seed, self.device, self.gens = seed, device, {}

    def __call__(self, tensor: torch.Tensor) -> torch.Generator:
        expert = getattr(tensor, "allreduce", True) is False
        key = ("expert" if expert else "dense", tuple(rank for _, _, rank, _, _ in shard_splits(tensor)))
        if key not in self.gens:
            key_seed = self.seed * 1_000_003 + zlib.crc32(repr(key).encode())
            self.gens[key] = torch.Generator(device=self.device).manual_seed(key_seed)
        return self.gens[key]


def init_weights(model: torch.nn.Module, seed: int) -> None:
    """Fill every parameter and buffer of `model` in place (see the module docstring)."""
    device = next(model.parameters()).device
    gen_for = ShardGenerators(seed, device)
    norms = {id(m.weight) for m in model.modules() if isinstance(m, RMSNorm)}
    hc_fn = {id(m.fn) for m in model.modules() if isinstance(m, HyperConnection)}
    lower_bound = model.spec.linear_lower_bound
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if id(tensor) in norms:
                tensor.fill_(1.0)
            elif id(tensor) in hc_fn:
                tensor.copy_(torch.randn(tensor.shape, generator=gen_for(tensor), device=device) * STD)
            else:
                tensor.copy_(_value(name, tensor, lower_bound, gen_for(tensor)))


def init_adapters(model: torch.nn.Module, seed: int) -> None:
    """LoRA A ~ N(0, 1/in) and B = 0 on every adapted module. Each A is drawn whole, from a
    generator keyed by its module's name, and cut to this rank's shard: every mesh starts
    from the same adapters (a tp2, ep2 or etp2 run trains as the data-parallel one does),
    and duplicated A's agree over TP and ETP. Adapters are small (GLM-5.3-Flash's largest A,
    a layer's routed experts at rank 16, is 113 MB in fp32), so the whole draw is cheap."""
    with torch.no_grad():
        for name, module in model.named_modules():
            if not hasattr(module, "lora_A"):
                continue
            a, b = module.lora_A, module.lora_B
            shape = whole_shape(a)
            gen = torch.Generator(device=a.device).manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            a.copy_(shard_of(torch.randn(shape, generator=gen, device=a.device) * shape[-1] ** -0.5, a))
            b.zero_()
