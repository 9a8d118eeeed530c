"""A trainer's LoRA adapter (WeightUpdate.adapter + tensors) as the PEFT folder vLLM loads.

vLLM's LoRARequest takes a path, so each version is written as adapter_config.json +
adapter_model.safetensors (a few hundred MB for GLM-5.3-Flash, docs/model.md section 4) into
one folder per engine that each version overwrites.
"""
import os

import torch


def write_adapter(folder: str, lora_kwargs: dict, tensors: dict[str, torch.Tensor]) -> str:
    from peft import LoraConfig
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    LoraConfig(**lora_kwargs).save_pretrained(folder)
    save_file({name: t.contiguous() for name, t in tensors.items()}, os.path.join(folder, "adapter_model.safetensors"))
    return folder
