"""Megatron trainer checkpoints: sharded, reshardable, with the optimizer's parameter state.

One folder, torch.distributed.checkpoint's format (DCP) plus two small JSON parts:

    .metadata, __<rank>_<i>.distcp   DCP: every tensor under its key with its WHOLE (global) shape;
                                     each rank writes only the chunks it owns
    trainer.json                     kind (full | lora), the base it adapts, mesh, optimizer step
    integrity/rank<r>.json           size and crc32 of each file rank r wrote (workers/integrity.py)

Keys. A later tool (`launcher export`) reads one whole tensor by key without a process
group: `read_tensor(path, key)`, i.e. DCP's `load({key: empty(global shape)}, no_dist=True)`.
    <name>                           model.named_parameters() names, which are
                                     model.megatron.mapping.name_table's first column for base
                                     weights; full fine-tuning adds persistent buffers
                                     (mlp.expert_bias); LoRA stores only the trainable adapters
    optimizer.exp_avg.<name>, optimizer.exp_avg_sq.<name>   Adam moments, the parameter's shape
    optimizer.fp32_param.<name>      the distributed optimizer's fp32 master weight (GPU)
    rng.cpu, rng.cuda                [world, n] uint8, row r = rank r's generator state

Layout. A rank's parameter is a slice of the whole tensor described by the attributes it
carries, read as model/megatron/shards.py reads them (partition_dim / partition_stride over
TP or ETP, experts split on dim 0 over EP when allreduce=False). A partition_stride > 1
(fc1's gate|up, conv1d's q|k|v) makes the slice several blocks of the whole tensor: each
block is its own chunk at its own global offset, so any mesh reads back exactly its rows.
The distributed optimizer holds, per parameter, a contiguous range of the flattened local
slice; that range is cut into at most 2*ndim-1 boxes (partial row, whole rows, partial
row) and each box into the parameter's blocks, all chunks of the same global tensor. Only
one rank writes each chunk: DP replicas of weights and CPU AdamW moments write on data-
parallel rank 0, TP/ETP-duplicated tensors on model-parallel rank 0; distributed-optimizer
ranges are disjoint over DP already.

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
import dataclasses
import hashlib
import json
import os
import threading
import time
from itertools import product
from math import prod
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from megatron.core import parallel_state as ps
from megatron.core.dist_checkpointing.mapping import ShardedTensor
from megatron.core.dist_checkpointing.strategies.checkpointable import (
    CheckpointableShardedTensor,
    LocalShardsContainer,
)
from torch.distributed.checkpoint import DefaultLoadPlanner, DefaultSavePlanner, FileSystemReader, FileSystemWriter

from launcher.contract.base_identity import base_fingerprint
from launcher.contract.errors import CheckpointError, CheckpointMismatchError
from launcher.workers.integrity import mismatch, read_records, write_json, write_record
from model.megatron.shards import shard_splits

FORMAT = "glm-megatron-dcp/1"
META = "trainer.json"
DCP_METADATA = ".metadata"


# ---------------------------------------------------------------- what a checkpoint is of

def _plain(value):
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:
        pass
    return value


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def identity(config) -> dict:
    """What this run's checkpoints are of: kind, LoRA settings, the base weights (the HF
    folder and its fingerprint, or the random init's seed and architecture)."""
    lora = config.trainer.lora
    if config.model.hf_path:
        base = {"hf_path": str(config.model.hf_path), "sha256": base_fingerprint(config.model.hf_path)}
    else:
        arch = json.dumps(_plain(config.model.arch), sort_keys=True, default=str)
        base = {"random_init_seed": int(config.run.seed), "arch_sha256": _sha256(arch.encode())}
    adapters = None
    if lora.rank > 0:
        adapters = {"rank": int(lora.rank), "alpha": float(lora.alpha), "targets": sorted(lora.targets),
                    "share_expert_adapters": bool(lora.share_expert_adapters),
                    "normalize_moe_lora": bool(lora.normalize_moe_lora)}
    return {"kind": "lora" if adapters else "full", "lora": adapters, "base": base}


def check_identity(path: str, saved: dict, current: dict) -> None:
    """Raise CheckpointMismatchError when `saved` (trainer.json) cannot resume `current`."""
    if saved["kind"] != current["kind"]:
        raise CheckpointMismatchError(
            f"{path} is a {saved['kind']} fine-tuning checkpoint but this run does {current['kind']} fine-tuning "
            "(trainer.lora.rank decides): resume with the settings it was written with, or start a new run.name")
    if saved["kind"] != "lora":
        return  # full fine-tuning holds every weight: the base it started from does not matter
    if saved["lora"] != current["lora"]:
        raise CheckpointMismatchError(f"{path} holds adapters for trainer.lora={saved['lora']} but this run has "
                                      f"trainer.lora={current['lora']}: resume with the same trainer.lora settings")
    was, now = saved["base"], current["base"]
    same = (was.get("sha256") == now.get("sha256") if "sha256" in was or "sha256" in now
            else was == now)
    if not same:
        raise CheckpointMismatchError(
            f"{path} holds LoRA adapters trained on base {_describe(was)}, but this run's base is {_describe(now)}: "
            "adapters only fit the weights they were trained on. Resume with that model.hf_path (or run.seed and "
            "model.arch for a random init), or start a new run.name")


def _describe(base: dict) -> str:
    if "sha256" in base:
        return f"model.hf_path={base['hf_path']} (model.safetensors.index.json sha256 {base['sha256'][:16]})"
    return f"random init run.seed={base['random_init_seed']} (model.arch sha256 {base['arch_sha256'][:16]})"


# ---------------------------------------------------------------- layout

def _chunk_ranges(lo: int, n: int, count: int) -> list[tuple[int, int]]:
    """torch.chunk's pieces of [lo, lo + n): ceil-sized, possibly fewer than `count`."""
    step = -(-n // count)
    return [(lo + i, min(step, n - i)) for i in range(0, n, step)]


def _dim_segments(extent: int, splits: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """[(local_lo, global_lo, length)] of one dimension after the (stride, rank, size) splits
    shards.shard_of applies to it, outermost first."""
    segments = [(0, 0, extent)]
    for stride, rank, size in splits:
        current = sum(n for _, _, n in segments)
        taken, local = [], 0
        for lo, n in _chunk_ranges(0, current, stride):
            parts = _chunk_ranges(lo, n, size)
            if rank >= len(parts):
                continue
            c_lo, c_n = parts[rank]
            for s_local, s_global, s_n in segments:  # map [c_lo, c_lo + c_n) through the current segments
                a, b = max(c_lo, s_local), min(c_lo + c_n, s_local + s_n)
                if a < b:
                    taken.append((local + a - c_lo, s_global + a - s_local, b - a))
            local += c_n
        segments = taken
    return segments


def layout(param: torch.Tensor) -> tuple[tuple[int, ...], list[tuple[tuple[slice, ...], tuple[int, ...]]]]:
    """(whole shape, [(local slices, global offset)]): the blocks of the whole tensor this
    rank's `param` holds, one per combination of its dimensions' contiguous runs."""
    shape = list(param.shape)
    per_dim = {d: [] for d in range(param.dim())}
    for dim, stride, rank, size, _ in shard_splits(param):
        per_dim[dim].append((stride, rank, size))
        shape[dim] *= size
    segments = [_dim_segments(shape[d], per_dim[d]) for d in range(param.dim())]
    blocks = []
    for combo in product(*segments):
        blocks.append((tuple(slice(lo, lo + n) for lo, _, n in combo), tuple(g for _, g, _ in combo)))
    return tuple(shape), blocks


def flat_boxes(shape: tuple[int, ...], start: int, end: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """[(offset, size)] boxes of a tensor of `shape` covering flat positions [start, end),
    in order; each box is contiguous in memory (leading single indices, one range, then
    whole trailing dims)."""
    if start >= end:
        return []
    if len(shape) <= 1:
        return [((start,), (end - start,))] if shape else [((), ())]
    inner = prod(shape[1:])
    r_start, o_start = divmod(start, inner)
    r_end, o_end = divmod(end, inner)
    if r_start == r_end:
        return [((r_start, *off), (1, *size)) for off, size in flat_boxes(shape[1:], o_start, o_end)]
    boxes = []
    if o_start:
        boxes += [((r_start, *off), (1, *size)) for off, size in flat_boxes(shape[1:], o_start, inner)]
        r_start += 1
    if r_end > r_start:
        boxes.append(((r_start,) + (0,) * (len(shape) - 1), (r_end - r_start, *shape[1:])))
    if o_end:
        boxes += [((r_end, *off), (1, *size)) for off, size in flat_boxes(shape[1:], 0, o_end)]
    return boxes


def _ravel(offset: tuple[int, ...], shape: tuple[int, ...]) -> int:
    index = 0
    for o, n in zip(offset, shape, strict=True):
        index = index * n + o
    return index


def flat_chunks(flat: torch.Tensor, start: int, local_shape: tuple[int, ...],
                blocks) -> list[tuple[torch.Tensor, tuple[int, ...]]]:
    """[(view of `flat`, global offset)]: `flat` holds flat positions [start, start + numel)
    of a local slice of `local_shape` whose blocks are `blocks` (layout())."""
    out = []
    for offset, size in flat_boxes(local_shape, start, start + flat.numel()):
        first = _ravel(offset, local_shape) - start
        box = flat[first:first + prod(size)].view(size)
        for local, global_offset in blocks:
            lo = [max(o, s.start) for o, s in zip(offset, local, strict=True)]
            hi = [min(o + n, s.stop) for o, n, s in zip(offset, size, local, strict=True)]
            if all(a < b for a, b in zip(lo, hi, strict=True)):
                view = box[tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, offset, strict=True))]
                out.append((view, tuple(g + a - s.start for g, a, s in zip(global_offset, lo, local, strict=True))))
    return out


def _model_parallel_rank(param: torch.Tensor) -> int:
    """This rank's index among the ranks holding the same slice as it over TP (ETP for experts)."""
    if getattr(param, "tensor_model_parallel", False):
        return 0
    expert = getattr(param, "allreduce", True) is False
    return ps.get_expert_tensor_parallel_rank() if expert else ps.get_tensor_model_parallel_rank()


def _data_parallel_rank(param: torch.Tensor) -> int:
    expert = getattr(param, "allreduce", True) is False
    return ps.get_expert_data_parallel_rank() if expert else ps.get_data_parallel_rank()


class _Chunks:
    """key -> [ShardedTensor] of this rank, and the whole shape and dtype of each key."""

    def __init__(self):
        self.by_key: dict[str, list[ShardedTensor]] = {}

    def add(self, key: str, data: torch.Tensor, global_shape: tuple[int, ...], offset: tuple[int, ...]) -> None:
        # axis_fragmentations=None: blocks of a strided split and optimizer boxes form no regular grid
        self.by_key.setdefault(key, []).append(ShardedTensor(key, data, data.dtype, tuple(data.shape),
                                                             tuple(global_shape), tuple(offset), None))

    def add_param(self, key: str, local: torch.Tensor, param: torch.Tensor) -> None:
        shape, blocks = layout(param)
        for slices, offset in blocks:
            self.add(key, local[slices], shape, offset)

    def add_flat(self, key: str, flat: torch.Tensor, start: int, param: torch.Tensor) -> None:
        shape, blocks = layout(param)
        for view, offset in flat_chunks(flat, start, tuple(param.shape), blocks):
            self.add(key, view, shape, offset)

    def staged(self) -> "_Chunks":
        """A copy in host memory (what an async write reads while training goes on)."""
        out = _Chunks()
        for key, tensors in self.by_key.items():
            for t in tensors:
                out.add(key, torch.empty(t.local_shape, dtype=t.dtype).copy_(t.data), t.global_shape, t.global_offset)
        return out

    def dcp_state(self) -> dict:
        state = {}
        for key, tensors in self.by_key.items():
            wrapped = [CheckpointableShardedTensor.from_sh_ten(t) for t in tensors]
            state[key] = wrapped[0] if len(wrapped) == 1 else LocalShardsContainer(wrapped)
        return state

    def nbytes(self) -> int:
        return sum(t.data.numel() * t.data.element_size() for ts in self.by_key.values() for t in ts)


# ---------------------------------------------------------------- what is saved

def _is_distributed(optimizer) -> bool:
    return bool(_distributed_parts(optimizer))


def _distributed_parts(optimizer):
    """Megatron's DistributedOptimizers inside `optimizer` (a ChainedOptimizer holds one for
    dense and one for expert parameters)."""
    return [o for o in getattr(optimizer, "chained_optimizers", [optimizer]) if hasattr(o, "shard_fp32_from_float16_groups")]


def _owned(part):
    """(model param, the inner optimizer's param for it, is_host_optimizer) for each
    parameter this rank owns a range of. Read from the parallel lists megatron-core keeps
    (model_*_groups and their shards), not from model_param_group_index_map: in 0.19.2 that
    map counts positions in buffer order while the inner optimizer's groups list the fp32
    shards first, so in a group mixing fp32 and bf16 weights it points at another parameter
    (megatron-core's own load_state_dict then gives a state the wrong size: the "6144 vs
    512" crash inside Adam)."""
    hybrid = hasattr(part.optimizer, "sub_optimizers")  # HybridDeviceOptimizer (cpu_offload)
    if part.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8 and not hybrid:
        raise NotImplementedError("checkpoints of megatron-core's precision-aware optimizer on the GPU (no host "
                                  "offload): its states are scaled copies; not used by this trainer")
    for g in range(len(part.model_float16_groups)):
        rows = [*zip(part.model_fp32_groups[g], part.shard_fp32_groups[g], part.shard_fp32_groups[g], strict=True),
                *zip(part.model_float16_groups[g], part.shard_float16_groups[g], part.shard_fp32_from_float16_groups[g],
                     strict=True)]
        for model_param, shard, main in rows:
            yield model_param, (shard if hybrid else main), hybrid


def _distributed_states(part):
    """(param, start, {state key: this rank's 1-D shard}) per parameter this rank owns a
    range of: fp32_param (the master), exp_avg, exp_avg_sq (Adam's state tensors)."""
    for param, inner, hybrid in _owned(part):
        span = part._get_model_param_range_map(param)["param"]
        state = part.optimizer.state[inner]
        states = {"fp32_param": state["master_param"] if hybrid else inner}
        states.update({k: v for k, v in state.items() if k not in ("step", "master_param") and torch.is_tensor(v)})
        for key, value in states.items():
            if value.numel() != span.end - span.start:
                raise CheckpointError(f"distributed optimizer: {key} of a parameter of shape {tuple(param.shape)} has "
                                      f"{value.numel()} elements, its range [{span.start}, {span.end}) has "
                                      f"{span.end - span.start}")
        yield param, span.start, states


def _step_of(states) -> int:
    steps = {int(s["step"]) for s in states if "step" in s}
    if len(steps) > 1:
        raise CheckpointError(f"optimizer steps differ between parameters ({sorted(steps)}): cannot store one step")
    return steps.pop() if steps else 0


def optimizer_step(optimizer) -> int:
    if _is_distributed(optimizer):
        return max([_step_of(p.optimizer.state.values()) for p in _distributed_parts(optimizer)], default=0)
    return _step_of(optimizer.state.values())


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


def _collect(model, optimizer, kind: str) -> tuple[_Chunks, int]:
    """This rank's chunks (only those it writes) and the optimizer step."""
    chunks = _Chunks()
    params = dict(model.named_parameters())
    names = {id(p): n for n, p in params.items()}
    for name in _saved_names(model, kind):
        param = params[name]
        if _model_parallel_rank(param) == 0 and _data_parallel_rank(param) == 0:
            chunks.add_param(name, param.detach(), param)
    if kind == "full" and dist.get_rank() == 0:
        for name, buffer in _persistent_buffers(model).items():
            chunks.add(name, buffer.detach(), tuple(buffer.shape), (0,) * buffer.dim())
    step = optimizer_step(optimizer)
    if step > 0 and _is_distributed(optimizer):
        for part in _distributed_parts(optimizer):
            for param, start, states in _distributed_states(part):
                if _model_parallel_rank(param) == 0:  # DP ranks own disjoint ranges
                    for key, flat in states.items():
                        chunks.add_flat(f"optimizer.{key}.{names[id(param)]}", flat.detach(), start, param)
    elif step > 0:
        for param, state in optimizer.state.items():
            if _model_parallel_rank(param) == 0 and _data_parallel_rank(param) == 0:
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


def _write(path: str, chunks: _Chunks, group) -> float:
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

    def __init__(self, path: str, chunks: _Chunks, group):
        self.path, self.write_s, self.error = path, None, None
        self.thread = threading.Thread(target=self._run, args=(chunks, group), name="checkpoint-write", daemon=True)
        self.thread.start()

    def _run(self, chunks, group) -> None:
        try:
            self.write_s = _write(self.path, chunks, group)
        except BaseException as err:  # noqa: BLE001 - re-raised by wait() in the caller's thread
            self.error = err

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
            "optimizer": "distributed" if _is_distributed(optimizer) else type(optimizer).__name__})
    stats = {"bytes": chunks.nbytes()}
    if not async_write:
        stats["write_s"] = _write(path, chunks, group)
        return {**stats, "blocked_s": time.perf_counter() - start}, None
    pending = PendingWrite(path, chunks.staged(), group)
    return {**stats, "write_s": None, "blocked_s": time.perf_counter() - start}, pending


# ---------------------------------------------------------------- reading

def _read_meta(path: str) -> dict:
    file = os.path.join(path, META)
    try:
        with open(file) as f:
            meta = json.load(f)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{file} is missing or damaged ({type(err).__name__}: {err})") from err
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{file}: format {meta.get('format')!r}, this trainer reads {FORMAT!r}")
    return meta


def _read_dcp_metadata(path: str):
    file = os.path.join(path, DCP_METADATA)
    try:
        return FileSystemReader(path).read_metadata()
    except Exception as err:  # noqa: BLE001 - unpickling a damaged file raises anything
        raise CheckpointError(f"{file} is missing or damaged ({type(err).__name__}: {err})") from err


def _check_files(path: str, metadata, meta: dict, group) -> None:
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


def _check_keys(path: str, targets: _Chunks, metadata) -> None:
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


def _prepare_distributed(optimizer, step: int, state_keys: set[str]) -> None:
    """Give every owned parameter its Adam state (`state_keys`) and set the step, in place
    where it exists. The host optimizer (cpu_offload) gets its states from one dummy step
    (megatron-core's HybridDeviceOptimizer.dummy_step), which also writes the model
    weights: they are loaded after this."""
    for part in _distributed_parts(optimizer):
        inner = part.optimizer
        if hasattr(inner, "sub_optimizers"):
            if not any(inner.state.values()):
                inner.dummy_step()
            for _, key, _ in _owned(part):
                inner.state[key]["step"].fill_(step)  # shared with its CPU sub-optimizer
            continue
        groups = {id(p): g for g in inner.param_groups for p in g["params"]}
        for _, main, _ in _owned(part):
            state = inner.state[main]
            on_device = groups[id(main)].get("capturable") or groups[id(main)].get("fused")
            state["step"] = torch.tensor(float(step), device=main.device if on_device else "cpu")
            for key in state_keys:
                if key not in state:
                    state[key] = torch.zeros_like(main, memory_format=torch.preserve_format)


def load(path: str, model, optimizer, ident: dict) -> dict:
    """Load the checkpoint at `path` into this rank's model, optimizer and generators, on
    any mesh (a collective: every rank calls it). Returns trainer.json."""
    group = _group()
    meta = _read_meta(path)
    check_identity(path, meta, ident)
    metadata = _read_dcp_metadata(path)
    _check_files(path, metadata, meta, group)
    stored = metadata.state_dict_metadata
    step = int(meta["optimizer_step"])
    params = dict(model.named_parameters())
    names = {id(p): n for n, p in params.items()}
    targets = _Chunks()
    distributed = _is_distributed(optimizer)
    optimizer_states = step > 0 and any(k.startswith("optimizer.") for k in stored)
    stored_states: dict[str, set[str]] = {}  # param name -> optimizer state keys in the checkpoint
    for key in stored:
        if key.startswith("optimizer."):
            _, state_key, name = key.split(".", 2)
            stored_states.setdefault(name, set()).add(state_key)
    masters_from_weights = []
    if optimizer_states and distributed:
        _prepare_distributed(optimizer, step, {k for keys in stored_states.values() for k in keys} - {"fp32_param"})
        for part in _distributed_parts(optimizer):
            for param, start, states in _distributed_states(part):
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
    _check_keys(path, targets, metadata)
    try:
        dcp.load(targets.dcp_state(), storage_reader=FileSystemReader(path),
                 planner=DefaultLoadPlanner(flatten_state_dict=False), process_group=group)
    except Exception as err:  # noqa: BLE001 - DCP wraps per-rank failures in its own exception
        raise CheckpointError(f"reading checkpoint {path} failed: {type(err).__name__}: {err}") from err
    for flat, start, param in masters_from_weights:
        flat.copy_(param.detach().reshape(-1)[start:start + flat.numel()])
    for part in _distributed_parts(optimizer) if optimizer_states else []:
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
    metadata = _read_dcp_metadata(path)
    md = metadata.state_dict_metadata.get(key)
    if md is None or not hasattr(md, "size"):
        raise CheckpointError(f"checkpoint {path} has no tensor {key!r}")
    out = {key: torch.empty(tuple(md.size), dtype=md.properties.dtype)}
    dcp.load(out, storage_reader=FileSystemReader(path), no_dist=True)
    return out[key]


def tensor_keys(path: str) -> dict[str, tuple[int, ...]]:
    """Every tensor key of a checkpoint with its whole shape."""
    return {k: tuple(md.size) for k, md in _read_dcp_metadata(path).state_dict_metadata.items() if hasattr(md, "size")}
