"""What the megatron trainer ships to the engines: checkpoint-named weights (LoRA merged),
or a peft-format adapter with the hf backend's LoraConfig, under the checkpoint's module
names (peft and vLLM both take those; peft maps them onto transformers' in-memory modules).

Weights leave one Megatron tensor at a time (model.megatron.weights.hf_stream), so a
weight sync never gathers the whole model at once.

Adapters map Megatron module names to checkpoint ones (model/names.py); a fused gate|up adapter (linear_fc1) becomes
two peft adapters sharing A, and per-expert adapters become experts.{e}.{gate,up,down}_proj.
Every adapter is rescaled and zero-padded to the config's rank so one peft scale
(alpha / rank) reproduces each module's own delta exactly (expert ranks may be smaller
with normalize_moe_lora).
"""
import torch

from model.megatron.shards import gather_full
from model.names import ATTENTION_MODULES, LM, MLP_PROJECTIONS

PEFT_PREFIX = "base_model.model."


def _pair(a: torch.Tensor, b: torch.Tensor, module_scale: float, rank: int, alpha: float):
    """(A, B) padded to `rank` with B scaled so alpha/rank * B A equals module_scale * B A."""
    pad = rank - a.shape[-2]
    a = torch.nn.functional.pad(a, (0, 0, 0, pad))
    b = torch.nn.functional.pad(b * (module_scale * rank / alpha), (0, pad))
    return a, b


def _hf_names(mname: str) -> list[str]:
    """Checkpoint module paths of a Megatron module path (several for a fused gate|up)."""
    layer, rest = mname.removeprefix("layers.").split(".", 1)
    base = f"{LM}layers.{layer}."
    owner, leaf = rest.rsplit(".", 1)
    if owner == "self_attention":
        return [f"{base}self_attn.{ATTENTION_MODULES[leaf]}"]
    mlp = base + owner.replace("shared_experts", "mlp.shared_experts").replace("mlp.mlp", "mlp")
    return [f"{mlp}.{proj}" for proj in MLP_PROJECTIONS[leaf]]


def adapter_tensors(model: torch.nn.Module, rank: int, alpha: float) -> dict[str, torch.Tensor]:
    """peft state-dict names -> whole adapter tensors (a collective: call on every rank)."""
    out = {}
    for mname, module in model.named_modules():
        if not hasattr(module, "lora_A"):
            continue
        a, b = gather_full(module.lora_A), gather_full(module.lora_B)
        if a.dim() == 3 or getattr(module, "shared", False):
            out.update(_expert_adapters(mname, a, b, module.scale, rank, alpha, model.spec.n_routed_experts))
            continue
        a, b = _pair(a, b, module.scale, rank, alpha)
        names = _hf_names(mname)
        for name, b_part in zip(names, b.chunk(len(names), dim=0), strict=True):
            out[f"{PEFT_PREFIX}{name}.lora_A.weight"] = a
            out[f"{PEFT_PREFIX}{name}.lora_B.weight"] = b_part
    return out


def _expert_adapters(mname, a, b, scale, rank, alpha, experts) -> dict[str, torch.Tensor]:
    if a.dim() == 2:
        a, b = a.expand(experts, *a.shape), b.expand(experts, *b.shape)
    layer = mname.split(".")[1]
    projs = MLP_PROJECTIONS[mname.rsplit(".", 1)[-1]]
    out = {}
    for e in range(experts):
        a_e, b_e = _pair(a[e], b[e], scale, rank, alpha)
        for proj, b_part in zip(projs, b_e.chunk(len(projs), dim=0), strict=True):
            name = f"{PEFT_PREFIX}{LM}layers.{layer}.mlp.experts.{e}.{proj}"
            out[f"{name}.lora_A.weight"] = a_e.contiguous()
            out[f"{name}.lora_B.weight"] = b_part.contiguous()
    return out
