"""LoRA for the hf backends through peft: targets, merged export and adapter export.

Recipes name targets the Megatron way (the GLM-5.3-Flash recipes are written for it);
launcher/plan/lora.py maps them to peft's: Linear modules by name, and the routed experts'
fused 3-D parameters (`mlp.experts.gate_up_proj`, `down_proj`) through `target_parameters`
(peft's ParamWrapper: one rank-r adapter per expert, gate_up wrapped inside down_proj).
Adapters leave and enter under the checkpoint's names, per expert for the fused ones
(names.expert_adapter_items out; peft's own conversion of transformers' rules in).
"""
import re
import warnings
from collections.abc import Iterator

import torch

from launcher.plan.lora import loading_kwargs
from launcher.workers.hf.names import checkpoint_adapter_items, expert_adapter_items

ADAPTER_NAME = "default"
_WRAPPED = re.compile(r"\.base_layer(?=\.|$)")


def wrap(model: torch.nn.Module, kwargs: dict) -> torch.nn.Module:
    """The trainer's model with fresh adapters (kwargs: plan.lora.adapter_kwargs). Expert
    parameters the model lacks (a dense model with linear_fc1 targeted) are left out of
    `target_parameters`, which peft would warn matched nothing."""
    from peft import LoraConfig, get_peft_model

    have = [name for name, _ in model.named_parameters()]
    present = [t for t in kwargs.get("target_parameters", ()) if any(n.endswith("." + t) for n in have)]
    kwargs = {k: v for k, v in kwargs.items() if k != "target_parameters"} | (
        {"target_parameters": present} if present else {})
    with warnings.catch_warnings():
        # peft checks rank_pattern / alpha_pattern keys against adapted modules only, so a key
        # for a target parameter is reported unmatched although it applies (tuners_utils.py).
        warnings.filterwarnings("ignore", r"The following (rank|alpha)_pattern keys did not match", RuntimeWarning)
        return get_peft_model(model, LoraConfig(**kwargs))


def wrap_for_loading(model: torch.nn.Module, kwargs: dict) -> torch.nn.Module:
    """An engine's model, wrapped so a checkpoint-named adapter (any trainer's) loads into it.
    Its adapters start at zero, not at peft's random A: one no tensor fills (the down_proj
    wrapper that only holds gate_up's, with linear_fc2 untargeted) then adds nothing and is
    the same in every engine."""
    wrapped = wrap(model, loading_kwargs(kwargs))
    with torch.no_grad():
        for name, param in wrapped.named_parameters():
            if "lora_" in name:
                param.zero_()
    return wrapped


def plain_name(peft_name: str) -> str:
    """A wrapped model's name as the plain model has it: peft's prefix and every `.base_layer`
    out (a fused expert parameter sits under two: `experts.base_layer.base_layer.gate_up_proj`)."""
    return _WRAPPED.sub("", peft_name.removeprefix("base_model.model."))


def _adapted(peft_model) -> dict[str, torch.nn.Module]:
    """{plain name of each adapted weight or parameter: its LoRA layer}."""
    from peft.tuners.lora import LoraLayer

    return {f"{plain_name(name)}.{getattr(module, 'parameter_name', 'weight')}": module
            for name, module in peft_model.named_modules()
            if isinstance(module, LoraLayer) and ADAPTER_NAME in module.lora_A}


def merged_items(peft_model, skip_prefix: str, with_delta: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Base weights with W + scale * B @ A folded in (unless not `with_delta`), under the
    plain model's names, one at a time in module order: only the merged tensor being
    yielded is new memory (the others are the live base tensors).

    Computed functionally (peft's merge/unmerge would add and subtract the delta in place,
    drifting the frozen base in floating point and breaking exact resumption).
    """
    adapted = _adapted(peft_model) if with_delta else {}
    for name, tensor in peft_model.state_dict().items():
        base = plain_name(name)
        if "lora_" in name or base.startswith(skip_prefix):
            continue
        if base in adapted:
            with torch.no_grad():  # not around the yield: grad mode is the caller's between items
                tensor = tensor + adapted[base].get_delta_weight(ADAPTER_NAME)
        yield base, tensor.detach()


def merged_state(peft_model, skip_prefix: str, with_delta: bool = True) -> dict[str, torch.Tensor]:
    """merged_items as a dict of copies."""
    return {name: tensor.clone() for name, tensor in merged_items(peft_model, skip_prefix, with_delta)}


def adapter_state(peft_model) -> dict[str, torch.Tensor]:
    """The adapter in peft's own names and layout (the trainer's checkpoint)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}


def checkpoint_adapter(peft_model) -> Iterator[tuple[str, torch.Tensor]]:
    """The adapter under the checkpoint's names, as the engines load it and export writes it:
    Linear adapters by module, each fused expert parameter's as one adapter per expert and
    checkpoint projection at the config's rank (the Megatron trainer's layout)."""
    from peft.tuners.lora import ParamWrapper

    base = peft_model.get_base_model()
    fused = {name for name, m in peft_model.named_modules() if isinstance(m, ParamWrapper)}
    linear = ((k, v) for k, v in adapter_state(peft_model).items() if k.rsplit(".lora_", 1)[0] not in fused)
    yield from checkpoint_adapter_items(base, linear)
    config = peft_model.peft_config[ADAPTER_NAME]
    for weight, module in _adapted(peft_model).items():
        if isinstance(module, ParamWrapper):
            yield from expert_adapter_items(base, weight, *_at_rank(module, config.r, config.lora_alpha),
                                            module.num_experts)


def _at_rank(module, rank: int, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A fused expert wrapper's (A, B) padded to `rank` per expert with B rescaled, so that
    alpha / rank * B A is the wrapper's own scale * B A (its rank is smaller with
    normalize_moe_lora): the one scale every adapter is served with, as the Megatron
    trainer pads (workers/megatron/_export.py)."""
    a, b = module.lora_A[ADAPTER_NAME].weight.detach(), module.lora_B[ADAPTER_NAME].weight.detach()
    own, experts = module.r[ADAPTER_NAME], module.num_experts
    if own > rank:
        raise ValueError(f"a fused expert adapter of rank {own} cannot be sent at rank {rank}: peft built it "
                         "above trainer.lora.rank (rule LORA013 refuses such models)")
    if own == rank and module.scaling[ADAPTER_NAME] == alpha / rank:
        return a, b
    factor = module.scaling[ADAPTER_NAME] * rank / alpha
    a = torch.nn.functional.pad(a.reshape(experts, own, -1), (0, 0, 0, rank - own)).reshape(experts * rank, -1)
    b = torch.nn.functional.pad(b.reshape(b.shape[0], own, experts) * factor, (0, 0, 0, rank - own))
    return a, b.reshape(b.shape[0], rank * experts)


def load_adapter(peft_model, tensors: dict[str, torch.Tensor]) -> None:
    """Checkpoint-named (or peft-named) adapter tensors into the wrapped model; peft converts
    per-expert names onto the fused parameters' wrappers by transformers' rules."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(peft_model, tensors)
    unexpected = [k for k in result.unexpected_keys if "lora_" in k]
    if unexpected:
        raise ValueError(f"adapter tensors the engine's model does not have: {unexpected[:5]}")


def to_peft_names(base_model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Plain parameter names -> the wrapped model's (`...q_proj.weight` -> `...q_proj.base_layer.weight`,
    `...experts.gate_up_proj` -> `...experts.base_layer.base_layer.gate_up_proj`)."""
    wrapped = {plain_name(name): name for name in base_model.state_dict()}
    return {wrapped.get(name, name): tensor for name, tensor in tensors.items()}
