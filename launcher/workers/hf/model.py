"""Build the transformers model a config describes: glm5_next (text + a tiny frozen vision
tower, which HF's class requires) or any causal LM type through AutoModelForCausalLM.

Nothing is built twice or on the wrong device (a 23.8B-parameter slice initialized on one
CPU thread took 9 minutes, and the first sync then overwrote it):
- from `model.hf_path` the checkpoint is read straight onto the actor's device;
- random init (model.hf_path null) runs HF's init rules on the actor's device, seeded, so
  every process that builds from the same config and seed on the same device holds the same
  weights;
- `empty` (an engine whose weights the first sync fills) allocates and initializes no
  parameter: they stay on the meta device until materialize() gives them storage. Buffers
  are built for real: the sync ships only the state dict, and non-persistent buffers (a
  rotary inv_freq) are not in it.
"""
import dataclasses
from collections.abc import Iterator

import torch

from launcher.config.model_folder import HF_FIELD_NAMES
from launcher.workers.hf.names import VISION_PREFIX, checkpoint_items

# The smallest vision tower HF's Glm5NextVisionModel accepts; it is never trained or used
# (language_model_only), it only has to exist for the class to build.
_TINY_VISION = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=16, patch_size=2, image_size=4,
                    spatial_merge_size=1, temporal_patch_size=1, projection_intermediate_size=16)


def _arch_fields(arch, pad_id: int) -> dict:
    fields = {k: v for k, v in dataclasses.asdict(arch).items() if v is not None}
    fields.pop("model_type")
    for ours, theirs in HF_FIELD_NAMES.get(arch.model_type, {}).items():  # else Qwen3MoeConfig builds 128 experts
        fields[theirs[0]] = fields.pop(ours)
    fields["pad_token_id"] = pad_id
    return fields


def _known_fields(config_cls) -> set[str]:
    names: set[str] = set()
    for klass in config_cls.__mro__:
        names |= set(vars(klass).get("__annotations__", {}))  # raw names: resolving hints fails on some configs
    return names


def hf_config(arch, pad_id: int):
    """The HF config object for `model.arch` (fields the model type does not know are dropped)."""
    from transformers import CONFIG_MAPPING

    fields = _arch_fields(arch, pad_id)
    if arch.model_type == "glm5_next":
        from transformers.models.glm5_next import Glm5NextConfig

        vision = dict(_TINY_VISION, out_hidden_size=arch.hidden_size)
        return Glm5NextConfig(text_config=fields, vision_config=vision, tie_word_embeddings=arch.tie_word_embeddings)
    config_cls = CONFIG_MAPPING[arch.model_type]
    known = _known_fields(config_cls)
    return config_cls(**{k: v for k, v in fields.items() if k in known})


def _model_class(model_type: str):
    if model_type == "glm5_next":
        from transformers.models.glm5_next import Glm5NextForConditionalGeneration

        return Glm5NextForConditionalGeneration
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM


def _from_config(cls, config, dtype: torch.dtype) -> torch.nn.Module:
    builder = cls.from_config if hasattr(cls, "from_config") else cls._from_config
    return builder(config, dtype=dtype)


def _architecture(model_cfg, pad_id: int):
    """The HF config: the checkpoint's own config.json when there is one, else `model.arch`."""
    if model_cfg.hf_path:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(model_cfg.hf_path)
    return hf_config(model_cfg.arch, pad_id)


def build_model(model_cfg, pad_id: int, seed: int, device: torch.device | str = "cpu",
                empty: bool = False) -> torch.nn.Module:
    """The model in `model.dtype` on `device`, vision tower frozen (module docstring: the
    three ways its weights come). `empty`: parameters on the meta device, for materialize()."""
    dtype = getattr(torch, getattr(model_cfg.dtype, "value", model_cfg.dtype))
    cls = _model_class(model_cfg.arch.model_type)
    if empty:
        from accelerate import init_empty_weights
        from transformers.initialization import no_init_weights

        with init_empty_weights(include_buffers=False), no_init_weights():
            model = _from_config(cls, _architecture(model_cfg, pad_id), dtype)
        model.tie_weights()  # done by the init_weights that no_init_weights skips
        _buffers_to(model, device)
    elif model_cfg.hf_path:
        model = cls.from_pretrained(model_cfg.hf_path, dtype=dtype, device_map=torch.device(device))
    else:
        torch.manual_seed(seed)
        with torch.device(device):
            model = _from_config(cls, hf_config(model_cfg.arch, pad_id), dtype)
    for name, param in model.named_parameters():
        if name.startswith(VISION_PREFIX):
            param.requires_grad_(False)
    return model


def _replace_parameters(model: torch.nn.Module, make, which) -> None:
    """Each parameter `which` picks becomes `make(param)` (tied parameters stay tied)."""
    done: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is None or not which(param):
                continue
            if id(param) not in done:
                done[id(param)] = torch.nn.Parameter(make(param), requires_grad=param.requires_grad)
            module._parameters[name] = done[id(param)]


def materialize(model: torch.nn.Module, device: torch.device | str) -> None:
    """Give every meta parameter uninitialized storage on `device`, buffers left as they are
    (Module.to_empty also empties the buffers: a non-persistent one, never synced, would
    then hold garbage)."""
    _replace_parameters(model, lambda p: torch.empty_like(p, device=device), lambda p: p.is_meta)


def drop_parameters(model: torch.nn.Module) -> None:
    """Free every parameter's storage (meta), keeping the buffers: a level-2 sleep."""
    _replace_parameters(model, lambda p: torch.empty_like(p, device="meta"), lambda p: True)


def _buffers_to(model: torch.nn.Module, device: torch.device | str) -> None:
    """Module.to for the buffers alone (it refuses meta parameters)."""
    for module in model.modules():
        for name, buf in module._buffers.items():
            if buf is not None:
                module._buffers[name] = buf.to(device)


def language_items(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor the engines need after a training step, all but the frozen vision
    tower, in module order (layer by layer); the live tensors, not copies."""
    for name, tensor in model.state_dict().items():
        if not name.startswith(VISION_PREFIX):
            yield name, tensor.detach()


def language_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """language_items as a dict of copies (the hf trainer's own checkpoints)."""
    return {name: tensor.clone() for name, tensor in language_items(model)}


def checkpoint_state(model: torch.nn.Module, tensors: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The language model's tensors (or `tensors` keyed like its state dict, e.g. grads)
    under the checkpoint's on-disk names: what the Megatron loader and engines take."""
    items = language_items(model) if tensors is None else (
        (k, v) for k, v in tensors.items() if not k.startswith(VISION_PREFIX))
    return {name: tensor.clone() for name, tensor in checkpoint_items(model, items)}


def forward_kwargs(model: torch.nn.Module, seq_len: int) -> dict:
    """Extra forward arguments that only change speed, never the result.

    Without fla's kernels, HF's pure-torch chunked KDA pads every sequence to its default
    64-token chunk; on the tiny recipes' ~10-token sequences that is ~20x the work. The
    chunked algorithm is exact for any chunk size, so pick one near the sequence length.
    """
    if getattr(model.config, "model_type", "") != "glm5_next":
        return {}
    chunk = 8
    while chunk < 64 and chunk * 2 < seq_len:
        chunk *= 2
    return {"chunk_size": chunk}
