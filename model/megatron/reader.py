"""Read only this rank's slices of a checkpoint folder (safetensors shards + index).

A rank of an 8-GPU node holds 1/8 of GLM-5.3-Flash (~73 GiB of 584); reading whole shards
on every rank would need the whole model in each rank's host memory. So every tensor is
fetched with safetensors' `get_slice`, narrowed to the indices the rank's parameter holds
(shards.shard_index), and only the shards that hold those tensors are opened (the index's
weight_map says which). One shard file is open at a time: consecutive tensors of the table
are mostly in the same file, and an mmap kept open would keep its touched pages resident.

`TensorDict` offers the same reads over in-memory tensors (tests, parity benchmarks).
Every failure names the file and the tensor (CheckpointFormatError), never a KeyError.
"""
import json
from itertools import groupby
from pathlib import Path

import torch
from safetensors import safe_open

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


FLOAT_DTYPES = {"F64", "F32", "BF16", "F16", "float64", "float32", "bfloat16", "float16"}
"""What both sources call a floating dtype (safetensors codes, torch names)."""


class CheckpointFormatError(ValueError):
    """The checkpoint folder does not hold what the model needs (file and tensor named)."""


def _runs(indices: list[int]) -> list[slice]:
    """Sorted indices as contiguous slices: [0,1,2,8,9] -> [0:3, 8:10]."""
    groups = groupby(enumerate(indices), key=lambda pair: pair[1] - pair[0])
    runs = [[i for _, i in group] for _, group in groups]
    return [slice(run[0], run[-1] + 1) for run in runs]


def _read_runs(get, runs_per_dim: list[list[slice]], chosen: tuple = ()) -> torch.Tensor:
    """The block of every combination of runs, concatenated back in order along each dim."""
    dim = len(chosen)
    if dim == len(runs_per_dim):
        return get(chosen)
    blocks = [_read_runs(get, runs_per_dim, chosen + (run,)) for run in runs_per_dim[dim]]
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=dim)  # a cat of one would copy it


class TensorDict:
    """Checkpoint-named tensors already in memory, read like a folder."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._get(name).shape)

    def dtype(self, name: str) -> str:
        return str(self._get(name).dtype).removeprefix("torch.")

    def read(self, name: str, index: list[list[int]]) -> torch.Tensor:
        tensor = self._get(name)
        return _read_runs(lambda slices: tensor[slices], [_runs(i) for i in index])

    def _get(self, name: str) -> torch.Tensor:
        if name not in self.tensors:
            raise CheckpointFormatError(f"tensor {name} is missing from the state dict given")
        return self.tensors[name]

    def close(self) -> None:
        pass


class SafetensorsFolder:
    """A `save_pretrained` folder: `model.safetensors.index.json` + shards, or one file."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.weight_map = self._weight_map()
        self._open_file: str | None = None
        self._reader = None

    def _weight_map(self) -> dict[str, str]:
        index = self.folder / INDEX_FILE
        if index.is_file():
            try:
                return dict(json.loads(index.read_text())["weight_map"])
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise CheckpointFormatError(f"{index}: not a safetensors index ({exc})") from exc
        single = self.folder / SINGLE_FILE
        if single.is_file():
            with self._open(SINGLE_FILE) as reader:
                return {name: SINGLE_FILE for name in reader.keys()}
        raise CheckpointFormatError(f"{self.folder}: neither {INDEX_FILE} nor {SINGLE_FILE} is there")

    def _open(self, file: str):
        path = self.folder / file
        if not path.is_file():
            raise CheckpointFormatError(f"{path}: the index names this shard but the file does not exist")
        try:
            return safe_open(str(path), framework="pt")
        except Exception as exc:  # safetensors raises its own error types for damaged headers
            raise CheckpointFormatError(f"{path}: unreadable safetensors file ({exc})") from exc

    def _slice(self, name: str):
        file = self.weight_map.get(name)
        if file is None:
            raise CheckpointFormatError(f"{self.folder / INDEX_FILE}: tensor {name} is not in the checkpoint")
        if file != self._open_file:
            self.close()
            self._reader, self._open_file = self._open(file).__enter__(), file
        try:
            return self._reader.get_slice(name)
        except Exception as exc:
            raise CheckpointFormatError(f"{self.folder / file}: tensor {name} cannot be read ({exc})") from exc

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._slice(name).get_shape())

    def dtype(self, name: str) -> str:
        return self._slice(name).get_dtype()

    def read(self, name: str, index: list[list[int]]) -> torch.Tensor:
        view = self._slice(name)
        try:
            return _read_runs(lambda slices: view[slices], [_runs(i) for i in index])
        except Exception as exc:  # a truncated shard fails here, when the bytes are touched
            raise CheckpointFormatError(f"{self.folder / self._open_file}: tensor {name} cannot be read "
                                        f"({exc}); is the file truncated?") from exc

    def close(self) -> None:
        if self._reader is not None:
            self._reader.__exit__(None, None, None)
        self._reader, self._open_file = None, None

    def file_of(self, name: str) -> str:
        return str(self.folder / self.weight_map.get(name, "?"))
