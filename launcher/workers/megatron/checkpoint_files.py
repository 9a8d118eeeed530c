"""A Megatron trainer checkpoint's files before DCP reads them: trainer.json, DCP's index,
every data file present, long enough and matching the crc32 its writer recorded
(launcher/workers/integrity.py), every key there with the whole shape this model expects.
"""
import json
import os
from math import prod
from pathlib import Path

import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemReader

from launcher.contract.errors import CheckpointError, CheckpointMismatchError
from launcher.workers.integrity import mismatch, read_records
from launcher.workers.megatron.checkpoint_layout import Chunks

FORMAT = "glm-megatron-dcp/1"
META = "trainer.json"
DCP_METADATA = ".metadata"


def read_meta(path: str) -> dict:
    file = os.path.join(path, META)
    try:
        with open(file) as f:
            meta = json.load(f)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{file} is missing or damaged ({type(err).__name__}: {err})") from err
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{file}: format {meta.get('format')!r}, this trainer reads {FORMAT!r}")
    return meta


def read_dcp_metadata(path: str):
    file = os.path.join(path, DCP_METADATA)
    try:
        return FileSystemReader(path).read_metadata()
    except Exception as err:  # noqa: BLE001 - unpickling a damaged file raises anything
        raise CheckpointError(f"{file} is missing or damaged ({type(err).__name__}: {err})") from err


def check_files(path: str, metadata, meta: dict, group) -> None:
    """Every file DCP will read is there and long enough (each rank, by stat), and matches
    the crc32 its writer recorded (files dealt round-robin over the ranks, errors shared)."""
    needed: dict[str, int] = {}
    for info in metadata.storage_data.values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    problems = []
    for name, length in sorted(needed.items()):
        file = Path(path) / name
        if not file.is_file():
            problems.append(f"{file} is missing")
        elif file.stat().st_size < length:
            problems.append(f"{file} is {file.stat().st_size} bytes, DCP's index reads up to byte {length} (cut short)")
    listed, unreadable = read_records(path, range(meta["world"]))
    problems += unreadable
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    for i, name in enumerate(sorted(needed)):
        file = Path(path) / name
        if i % world == rank and name in listed and file.is_file() and not problems:
            if (problem := mismatch(file, listed[name])) is not None:
                problems.append(problem)
    every = [None] * world
    dist.all_gather_object(every, problems, group=group)
    found = sorted({p for rank_problems in every for p in rank_problems})
    if found:
        raise CheckpointError(f"checkpoint {path} is damaged: " + "; ".join(found))


def check_keys(path: str, targets: Chunks, metadata) -> None:
    """Each key asked for is in the checkpoint with the expected whole shape, and its
    chunks there add up to the whole tensor (a write that lost a chunk is damage)."""
    stored = metadata.state_dict_metadata
    for key, tensors in targets.by_key.items():
        if key not in stored:
            raise CheckpointError(f"checkpoint {path} has no tensor {key!r} (its trainer.json says it should)")
        md, want = stored[key], tensors[0].global_shape
        if tuple(md.size) != tuple(want):
            raise CheckpointMismatchError(f"checkpoint {path}: {key} has shape {tuple(md.size)}, this model's is {want} "
                                          "(another model.arch?)")
        if sum(prod(c.sizes) for c in md.chunks) != prod(want):
            raise CheckpointError(f"checkpoint {path}: the chunks of {key} do not cover it (a rank's write is missing)")

