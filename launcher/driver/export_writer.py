"""An HF checkpoint folder written as a stream: sharded safetensors + index, base files.

Tensors arrive one at a time (the trainer's weight stream); a shard is written as soon as
it reaches `max_shard_bytes`, so the writer holds one shard at most, never the model.
Shards get their final `model-0000i-of-0000N` names once N is known. Everything that is
not a language-model weight (config.json, generation_config.json, tokenizer files, a
vision tower's tensors) comes from the base checkpoint, so `from_pretrained` and vLLM
load the folder as they load the base.
"""
import json
import shutil
from pathlib import Path

import torch

from model.megatron.reader import INDEX_FILE, SafetensorsFolder

DEFAULT_SHARD_BYTES = 5 * 2**30
"""What `save_pretrained` uses for large models (5 GB-ish shards)."""


class ShardWriter:
    def __init__(self, folder: Path, max_shard_bytes: int = DEFAULT_SHARD_BYTES):
        self.folder, self.max_bytes = Path(folder), max_shard_bytes
        self.pending: dict[str, torch.Tensor] = {}
        self.pending_bytes = self.total_bytes = 0
        self.files: list[str] = []
        self.weight_map: dict[str, str] = {}

    def add(self, name: str, tensor: torch.Tensor) -> None:
        if name in self.weight_map or name in self.pending:
            raise ValueError(f"tensor {name} was written twice: the weight stream must name each tensor once")
        size = tensor.numel() * tensor.element_size()
        if self.pending and self.pending_bytes + size > self.max_bytes:
            self._flush()
        self.pending[name] = tensor.detach().to("cpu").contiguous()
        self.pending_bytes += size
        self.total_bytes += size

    def has(self, name: str) -> bool:
        return name in self.weight_map or name in self.pending

    def _flush(self) -> None:
        from safetensors.torch import save_file

        file = f"part-{len(self.files) + 1:05d}.safetensors"
        save_file(self.pending, str(self.folder / file), metadata={"format": "pt"})
        self.files.append(file)
        self.weight_map.update(dict.fromkeys(self.pending, file))
        self.pending, self.pending_bytes = {}, 0

    def close(self) -> None:
        """Last shard, final shard names, and the index."""
        if self.pending:
            self._flush()
        count = len(self.files)
        final = {f: f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i, f in enumerate(self.files)}
        for old, new in final.items():
            (self.folder / old).rename(self.folder / new)
        index = {"metadata": {"total_size": self.total_bytes},
                 "weight_map": {name: final[file] for name, file in sorted(self.weight_map.items())}}
        (self.folder / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")


def copy_base_files(base: Path, out: Path) -> None:
    """Config, generation config, tokenizer and template files of the base: all but weights."""
    for item in base.iterdir():
        if item.is_file() and not item.name.endswith(".safetensors") and item.name != INDEX_FILE:
            shutil.copy2(item, out / item.name)


def copy_other_tensors(base: Path, writer: ShardWriter) -> int:
    """The base's tensors the trainer does not train (a vision tower), one at a time."""
    folder = SafetensorsFolder(base)
    copied = 0
    try:
        for name in folder.weight_map:
            if not writer.has(name):
                writer.add(name, folder.read(name, [list(range(n)) for n in folder.shape(name)]))
                copied += 1
    finally:
        folder.close()
    return copied
