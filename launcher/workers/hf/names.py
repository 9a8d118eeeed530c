"""Checkpoint names <-> transformers' in-memory names, by transformers' own conversion rules.

Weights travel between trainer and engines under the checkpoint's on-disk names (what
`save_pretrained` writes and vLLM loads: per-expert `mlp.experts.{e}.gate_proj`, separate
q/k/v conv weights, `hc_attn_fn`), while a transformers glm5_next model in memory holds
fused experts, one conv and `attn_hc.fn`. transformers converts between the two when it
loads and saves (conversion_mapping.py, core_model_loading.py); this module runs the same
rules per tensor, so the hf backends never keep a name table of their own. Model types
without rules (qwen3) pass through unchanged.
"""
import copy
from collections.abc import Iterable, Iterator

import torch

from launcher.workers.hf.experts_in_place import copy_in_place, expert_slots

VISION_PREFIX = "model.visual."
"""In-memory names of the vision tower, which the language model's weights, sync and export leave out."""


def _keep_conversion_rules(model) -> None:
    """revert_weight_conversion rebuilds a model's rules (deep copies of the whole mapping,
    ~3 ms) on every call unless the model carries them, as a from_pretrained model does; a
    model built from its config gets them here once, the list transformers would build. Per
    tensor that rebuild made a 1.2 MiB tiny model's weight export take 150 ms."""
    if getattr(model, "_weight_conversions", None) is not None:
        return
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import PrefixChange

    rules = [rule for rule in get_model_conversion_mapping(model, add_legacy=False) if not isinstance(rule, PrefixChange)]
    if rules:
        model._weight_conversions = rules


BATCH_BYTES = 64 << 20
"""Source tensors converted per call: each call reverses every rule again (~0.5 ms for
glm5_next's), so one call per tensor cost more than the copy; a batch holds at most this
much beyond one tensor (the merged LoRA weights of a stream are fresh tensors)."""


def checkpoint_items(model, items: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """In-memory (name, tensor) pairs -> checkpoint (name, tensor) pairs, converted a batch at
    a time (every glm5_next rule maps one in-memory tensor to one or many checkpoint tensors,
    so a batch converts as its tensors would one by one)."""
    from transformers.core_model_loading import revert_weight_conversion

    _keep_conversion_rules(model)
    batch, batch_bytes = {}, 0
    for name, tensor in items:
        batch[name] = tensor
        batch_bytes += tensor.numel() * tensor.element_size()
        if batch_bytes >= BATCH_BYTES:
            yield from revert_weight_conversion(model, batch).items()
            batch, batch_bytes = {}, 0
    if batch:
        yield from revert_weight_conversion(model, batch).items()


def checkpoint_shapes_of(model, names_and_shapes: dict[str, torch.Size]) -> dict[str, dict[str, tuple]]:
    """{in-memory name: {checkpoint name: shape}} of the checkpoint tensors it is made of,
    worked out on meta tensors."""
    out = {}
    for name, shape in names_and_shapes.items():
        meta = torch.empty(shape, device="meta")
        out[name] = {k: tuple(t.shape) for k, t in checkpoint_items(model, [(name, meta)])}
    return out


def checkpoint_names_of(model, names_and_shapes: dict[str, torch.Size]) -> dict[str, set[str]]:
    """{in-memory name: the checkpoint names it is made of}, worked out on meta tensors."""
    return {name: set(parts) for name, parts in checkpoint_shapes_of(model, names_and_shapes).items()}


class ModelNameAssembler:
    """Collects checkpoint-named tensors (a weight update's buckets) and hands back
    in-memory-named ones as soon as every checkpoint tensor of one is in (the 2 x experts
    tensors of a fused expert weight can span buckets)."""

    def __init__(self, model, shapes: dict[str, torch.Size]):
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming

        self.model = model
        transforms = get_model_conversion_mapping(model, add_legacy=False)
        self.renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
        self.converters = [t for t in transforms if isinstance(t, WeightConverter)]
        parts = checkpoint_shapes_of(model, shapes)
        self.sources = {target: set(p) for target, p in parts.items()}
        self.expected = {name: shape for p in parts.values() for name, shape in p.items()}
        """{checkpoint name: shape}: every checkpoint tensor of the model (the sync manifest)."""
        self.target_of = {src: target for target, srcs in self.sources.items() for src in srcs}
        self.pending: dict[str, dict[str, torch.Tensor]] = {}
        self.slots = expert_slots(self.converters, self.sources, self.expected)
        """Checkpoint tensors of fused experts that `add` can copy into place (experts_in_place.py)."""

    def add(self, tensors: dict[str, torch.Tensor],
            parameters: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Take checkpoint-named tensors; return the in-memory tensors now complete. With
        `parameters` ({in-memory name: the model's tensor}), a fused expert's pieces are
        copied into it as they come instead (nothing returned or kept for them)."""
        done = {}
        for name, tensor in tensors.items():
            target = self.target_of.get(name)
            if target is None:
                raise ValueError(f"weight {name} is not a checkpoint tensor of this model "
                                 f"(expected names such as {sorted(self.target_of)[:3]})")
            if parameters is not None and name in self.slots:
                copy_in_place(parameters, self.slots[name], tensor)
                continue
            group = self.pending.setdefault(target, {})
            group[name] = tensor
            if set(group) == self.sources[target]:
                done.update(self._convert(self.pending.pop(target)))
        return done

    def unfinished(self) -> list[str]:
        """Checkpoint names still missing from partly received tensors."""
        return sorted(n for target, group in self.pending.items() for n in self.sources[target] - set(group))

    def _convert(self, group: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        from transformers.core_model_loading import dot_natural_key, rename_source_key

        converters, out = {}, {}
        by_pattern = {p: c for c in self.converters for p in c.source_patterns}
        for key, tensor in sorted(group.items(), key=lambda kv: dot_natural_key(kv[0])):
            renamed, pattern = rename_source_key(key, self.renamings, self.converters)
            if pattern is None:
                out[renamed] = tensor
                continue
            converter = converters.setdefault(renamed, copy.deepcopy(by_pattern[pattern]))
            converter.add_tensor(renamed, key, pattern, tensor)
        for renamed, converter in converters.items():
            for target, value in converter.convert(renamed, model=self.model, config=self.model.config).items():
                out[target] = value[0] if isinstance(value, list) else value
        return out


def model_state(model, checkpoint_tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A whole checkpoint-named state dict under the model's in-memory names (tests, export checks)."""
    shapes = {k: v.shape for k, v in model.state_dict().items() if not k.startswith(VISION_PREFIX)}
    assembler = ModelNameAssembler(model, shapes)
    out = assembler.add(checkpoint_tensors)
    if assembler.unfinished():
        raise ValueError(f"checkpoint tensors missing: {assembler.unfinished()[:5]}")
    return out


def checkpoint_adapter_items(model, items: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """peft adapter tensors under the checkpoint's module names (`...forget_gate.f_a_proj.lora_A`
    -> `...self_attn.f_a_proj.lora_A`), which peft and vLLM load; the module's own weight name
    goes through transformers' rules to find it."""
    for name, tensor in items:
        module, lora_part = name.split(".lora_", 1)
        prefix = "base_model.model." if module.startswith("base_model.model.") else ""
        weight = module.removeprefix(prefix) + ".weight"
        renamed = [k for k, _ in checkpoint_items(model, [(weight, torch.empty(1, 1, device="meta"))])]
        if len(renamed) != 1:
            raise ValueError(f"adapter on {module}: its weight is {len(renamed)} checkpoint tensors, so the "
                             "adapter has no checkpoint name")
        yield f"{prefix}{renamed[0].removesuffix('.weight')}.lora_{lora_part}", tensor


PEFT_PREFIX = "base_model.model."


def expert_adapter_items(model, weight: str, lora_A: torch.Tensor, lora_B: torch.Tensor,
                         experts: int) -> Iterator[tuple[str, torch.Tensor]]:
    """A fused expert parameter's adapter in peft's ParamWrapper layout (A [experts x r, in]:
    expert e's rows e*r...; B [out, r x experts]: expert e's columns e::experts) as one
    adapter per checkpoint tensor the parameter is made of (`experts.{e}.gate_proj`,
    `experts.{e}.up_proj`), A shared by a fused gate and up as the Megatron trainer sends
    them. Which rows of which expert each checkpoint tensor holds is read off a tensor of
    row numbers converted by transformers' rules, so no layout is written down here."""
    out_features = lora_B.shape[0]
    rows = torch.arange(experts * out_features).reshape(experts, out_features, 1)
    a_per_expert = lora_A.reshape(experts, -1, lora_A.shape[-1])
    b_per_expert = lora_B.reshape(out_features, -1, experts)
    for name, numbers in checkpoint_items(model, [(weight, rows)]):
        numbers = numbers.reshape(-1)
        expert = int(numbers[0]) // out_features
        module = PEFT_PREFIX + name.removesuffix(".weight")
        yield f"{module}.lora_A.weight", a_per_expert[expert].clone()
        yield f"{module}.lora_B.weight", b_per_expert[numbers % out_features, :, expert].contiguous()
