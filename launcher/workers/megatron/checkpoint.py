"""Megatron trainer checkpoints: sharded, reshardable, with the optimizer's parameter state.

One folder, torch.distributed.checkpoint's format (DCP) plus two small JSON parts:

    .metadata, __<rank>_<i>.distcp   DCP: every tensor under its key with its WHOLE (global) shape;
                                     each rank writes only the chunks it owns
    trainer.json                     kind (full | lora), the base it adapts, mesh, optimizer step
    integrity/rank<r>.json           size and crc32 of each file rank r wrote (workers/integrity.py)

Keys. A later tool (`launcher export`) reads one whole tensor by key without a process
group: `read_tensor(path, key)` (`read_tensors(path, keys)` for several in one load), i.e. DCP's
`load({key: empty(global shape)}, no_dist=True)`.
    <name>                           model.named_parameters() names, which are
                                     model.megatron.mapping.name_table's first column for base
                                     weights; full fine-tuning adds persistent buffers
                                     (mlp.expert_bias); LoRA stores only the trainable adapters
    optimizer.exp_avg.<name>, optimizer.exp_avg_sq.<name>   Adam moments, the parameter's shape
    optimizer.fp32_param.<name>      the distributed optimizer's fp32 master weight (GPU)
    rng.cpu, rng.cuda                [world, n] uint8, row r = rank r's generator state

This file saves and loads; beside it: checkpoint_layout.py (where a rank's slice sits in
the whole tensors, the chunks), checkpoint_optimizer.py (the optimizer's states),
checkpoint_files.py (trainer.json and the file and key checks before a load),
checkpoint_identity.py (what a checkpoint is of, whether it can resume this run).

Why DCP directly and not megatron-core's dist_checkpointing.save (read in 0.19.2's source):
- DistributedOptimizer.sharded_state_dict's default 'fully_sharded_model_space' builds
  ShardedTensors with flattened_range, which 0.19.2's ShardedTensor rejects ("flattened_range
  is not supported"); 'fully_reshardable' gathers every DP rank's Adam state onto each rank
  (or DP rank 0) before writing; 'dp_reshardable' reshards over DP only (its buffers are the
  bucket layout). None writes only what a rank owns and still reshards TP/EP.
- its async path (AsyncCallsQueue) all-reduces on torch.cuda.current_device (no CPU run),
  forks the trainer process to write and relies on fork's copy-on-write to snapshot host
  tensors; even its sync save starts a multiprocessing Manager for write results.
So the chunks are megatron-core ShardedTensors wrapped by its DCP adapters
(CheckpointableShardedTensor / LocalShardsContainer) and written by DCP itself; collectives
go over a gloo group of their own, so an async write in a thread never interleaves with
training's collectives. Non-tensor data is JSON: no pickle is loaded (DCP reads tensors
with torch.load(weights_only=True); its .metadata is its own format).
"""
import os
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from megatron.core import parallel_state as ps
from torch.distributed.checkpoint import DefaultLoadPlanner, DefaultSavePlanner, FileSystemReader, FileSystemWriter

from launcher.contract.errors import CheckpointError
from launcher.workers.integrity import write_json, write_record
from launcher.workers.megatron.checkpoint_files import (
    FORMAT,
    META,
    check_files,
    check_keys,
    read_dcp_metadata,
    read_meta,
)
from launcher.workers.megatron.checkpoint_identity import check_identity
from launcher.workers.megatron.checkpoint_layout import Chunks, data_parallel_rank, model_parallel_rank
from launcher.workers.megatron.checkpoint_optimizer import (
    distributed_parts,
    distributed_states,
    is_distributed,
    optimizer_step,
    prepare_distributed,
)

# ---------------------------------------------------------------- what is saved

def _saved_names(model, kind: str) -> list[str]:
    return [n for n, p in model.named_parameters() if kind == "full" or p.requires_grad]


def _persistent_buffers(model) -> dict[str, torch.Tensor]:
    keys = set(model.state_dict(keep_vars=True))
    return {n: b for n, b in model.named_buffers() if n in keys}


def _rng_states() -> dict[str, torch.Tensor]:
    states = {"rng.cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["rng.cuda"] = torch.cuda.get_rng_state()
    return states


def _collect(model, optimizer, kind: str) -> tuple[Chunks, int]:
    """This rank's chunks (only those it writes) and the optimizer step."""
    chunks = Chunks()
    params = dict(model.named_parameters())
    names = {id(p): n for n, p in params.items()}
    for name in _saved_names(model, kind):
        param = params[name]
        if model_parallel_rank(param) == 0 and data_parallel_rank(param) == 0:
            chunks.add_param(name, param.detach(), param)
    if kind == "full" and dist.get_rank() == 0:
        for name, buffer in _persistent_buffers(model).items():
            chunks.add(name, buffer.detach(), tuple(buffer.shape), (0,) * buffer.dim())
    step = optimizer_step(optimizer)
    if step > 0 and is_distributed(optimizer):
        for part in distributed_parts(optimizer):
            for param, start, states in distributed_states(part):
                if model_parallel_rank(param) == 0:  # DP ranks own disjoint ranges
                    for key, flat in states.items():
                        chunks.add_flat(f"optimizer.{key}.{names[id(param)]}", flat.detach(), start, param)
    elif step > 0:
        for param, state in optimizer.state.items():
            if model_parallel_rank(param) == 0 and data_parallel_rank(param) == 0:
                for key, value in state.items():
                    if key != "step" and torch.is_tensor(value) and value.shape == param.shape:
                        chunks.add_param(f"optimizer.{key}.{names[id(param)]}", value.detach(), param)
    rank, world = dist.get_rank(), dist.get_world_size()
    for key, state in _rng_states().items():
        chunks.add(key, state[None], (world, state.numel()), (rank, 0))
    return chunks, step


# ---------------------------------------------------------------- writing

_GROUP: dict = {}


def _group():
    """A gloo group of every rank, for checkpoint collectives only (cached per world group)."""
    world = dist.group.WORLD
    if _GROUP.get("world") is not world:
        _GROUP.update(world=world, group=dist.new_group(backend="gloo"))
    return _GROUP["group"]


def _write(path: str, chunks: Chunks, group) -> float:
    """DCP save of `chunks` (a collective over `group`) and this rank's integrity list."""
    start = time.perf_counter()
    dcp.save(chunks.dcp_state(), storage_writer=FileSystemWriter(path, sync_files=True),
             planner=DefaultSavePlanner(flatten_state_dict=False, flatten_sharded_tensors=False), process_group=group)
    rank = dist.get_rank(group)
    write_record(path, rank, list(Path(path).glob(f"__{rank}_*.distcp")))
    return time.perf_counter() - start


class PendingWrite:
    """An async checkpoint write in a thread of this rank; wait() on every rank before the
    checkpoint counts as complete."""

    def __init__(self, path: str, chunks: Chunks, group):
        self.path, self.write_s, self.error = path, None, None
        self.thread = threading.Thread(target=self._run, args=(chunks, group), name="checkpoint-write", daemon=True)
        self.thread.start()

    def _run(self, chunks, group) -> None:
        try:
            self.write_s = _write(self.path, chunks, group)
        except BaseException as err:  # noqa: BLE001 - re-raised by wait() in the caller's thread
            self.error = err

    def done(self) -> bool:
        """The write thread has ended (written or failed: wait() says which)."""
        return not self.thread.is_alive()

    def wait(self) -> float:
        """Seconds the write took (raises what it raised)."""
        self.thread.join()
        if self.error is not None:
            raise CheckpointError(f"writing checkpoint {self.path} failed: {self.error}") from self.error
        return self.write_s


def save(path: str, model, optimizer, ident: dict, async_write: bool = False) -> tuple[dict, PendingWrite | None]:
    """Write this rank's part of the checkpoint at `path` (a collective: every rank calls it).

    Returns ({"blocked_s", "write_s", "bytes"}, pending): with async_write the tensors are
    copied to host memory (blocked_s) and written by a thread; `pending.wait()` gives write_s."""
    start = time.perf_counter()
    group = _group()
    os.makedirs(path, exist_ok=True)
    chunks, step = _collect(model, optimizer, ident["kind"])
    if dist.get_rank() == 0:
        mesh = {"tp": ps.get_tensor_model_parallel_world_size(), "ep": ps.get_expert_model_parallel_world_size(),
                "etp": ps.get_expert_tensor_parallel_world_size(), "dp": ps.get_data_parallel_world_size()}
        write_json(os.path.join(path, META), {
            "format": FORMAT, **ident, "world": dist.get_world_size(), "mesh": mesh, "optimizer_step": step,
            "optimizer": "distributed" if is_distributed(optimizer) else type(optimizer).__name__})
    stats = {"bytes": chunks.nbytes()}
    if not async_write:
        stats["write_s"] = _write(path, chunks, group)
        return {**stats, "blocked_s": time.perf_counter() - start}, None
    pending = PendingWrite(path, chunks.staged(), group)
    return {**stats, "write_s": None, "blocked_s": time.perf_counter() - start}, pending


# ---------------------------------------------------------------- reading

def load(path: str, model, optimizer, ident: dict) -> dict:
    """Load the checkpoint at `path` into this rank's model, optimizer and generators, on
    any mesh (a collective: every rank calls it). Returns trainer.json."""
    group = _group()
    meta = read_meta(path)
    check_identity(path, meta, ident)
    metadata = read_dcp_metadata(path)
    check_files(path, metadata, meta, group)
    stored = metadata.state_dict_metadata
    step = int(meta["optimizer_step"])
    params = dict(model.named_parameters())
    names = {id(p): n for n, p in params.items()}
    targets = Chunks()
    distributed = is_distributed(optimizer)
    optimizer_states = step > 0 and any(k.startswith("optimizer.") for k in stored)
    stored_states: dict[str, set[str]] = {}  # param name -> optimizer state keys in the checkpoint
    for key in stored:
        if key.startswith("optimizer."):
            _, state_key, name = key.split(".", 2)
            stored_states.setdefault(name, set()).add(state_key)
    masters_from_weights = []
    if optimizer_states and distributed:
        prepare_distributed(optimizer, step, {k for keys in stored_states.values() for k in keys} - {"fp32_param"})
        for part in distributed_parts(optimizer):
            for param, start, states in distributed_states(part):
                name = names[id(param)]
                for key, flat in states.items():
                    if key == "fp32_param" and key not in stored_states.get(name, ()):
                        masters_from_weights.append((flat, start, param))  # written by the CPU trainer (AdamW)
                    else:
                        targets.add_flat(f"optimizer.{key}.{name}", flat.detach(), start, param)
    elif optimizer_states:
        for param in (p for g in optimizer.param_groups for p in g["params"]):
            keys = sorted(stored_states.get(names[id(param)], set()) - {"fp32_param"})
            if not keys:
                continue  # it had no state when saved (no grad yet): it stays without
            state = {"step": torch.tensor(float(step))}
            for key in keys:
                state[key] = torch.empty_like(param, memory_format=torch.contiguous_format)
                targets.add_param(f"optimizer.{key}.{names[id(param)]}", state[key], param)
            optimizer.state[param] = state
    for name in _saved_names(model, ident["kind"]):
        targets.add_param(name, params[name].detach(), params[name])
    if ident["kind"] == "full":
        for name, buffer in _persistent_buffers(model).items():
            targets.add(name, buffer.detach(), tuple(buffer.shape), (0,) * buffer.dim())
    saved_world, rank = int(meta["world"]), dist.get_rank()
    rng = {}
    for key, state in _rng_states().items():
        if key in stored:
            rng[key] = torch.empty_like(state)[None]
            targets.add(key, rng[key], (saved_world, state.numel()), (rank % saved_world, 0))
    check_keys(path, targets, metadata)
    try:
        dcp.load(targets.dcp_state(), storage_reader=FileSystemReader(path),
                 planner=DefaultLoadPlanner(flatten_state_dict=False), process_group=group)
    except Exception as err:  # noqa: BLE001 - DCP wraps per-rank failures in its own exception
        raise CheckpointError(f"reading checkpoint {path} failed: {type(err).__name__}: {err}") from err
    for flat, start, param in masters_from_weights:
        flat.copy_(param.detach().reshape(-1)[start:start + flat.numel()])
    for part in distributed_parts(optimizer) if optimizer_states else []:
        if hasattr(part.optimizer, "sub_optimizers"):  # loaded in place; this also refreshes its fp32 copies
            part.optimizer._sync_hdo_state_to_sub_optimizers()
    if distributed and not optimizer_states:
        optimizer.reload_model_params()  # fp32 masters from the loaded weights
    if "rng.cpu" in rng:
        torch.set_rng_state(rng["rng.cpu"][0])
    if "rng.cuda" in rng:
        torch.cuda.set_rng_state(rng["rng.cuda"][0])
    return meta


def read_tensor(path: str, key: str) -> torch.Tensor:
    """One whole tensor of a checkpoint by key, in this process alone (no process group):
    what `launcher export` reads. Raises CheckpointError naming a missing key."""
    return read_tensors(path, [key])[key]


def read_tensors(path: str, keys: list[str]) -> dict[str, torch.Tensor]:
    """`read_tensor` of several keys in one DCP load (one metadata read and plan, not one per key)."""
    metadata = read_dcp_metadata(path)
    out = {}
    for key in keys:
        md = metadata.state_dict_metadata.get(key)
        if md is None or not hasattr(md, "size"):
            raise CheckpointError(f"checkpoint {path} has no tensor {key!r}")
        out[key] = torch.empty(tuple(md.size), dtype=md.properties.dtype)
    dcp.load(out, storage_reader=FileSystemReader(path), no_dist=True)
    return out


def tensor_keys(path: str) -> dict[str, tuple[int, ...]]:
    """Every tensor key of a checkpoint with its whole shape."""
    return {k: tuple(md.size) for k, md in read_dcp_metadata(path).state_dict_metadata.items() if hasattr(md, "size")}
