"""The `hf` trainer rank: a transformers model trained with torch, gloo/NCCL data parallel.

Gradients are summed over ranks (not averaged): each rank's loss is already divided by
the whole mini-batch's normaliser (grpo.token_weights), so the sum is the exact
single-process gradient whatever the split of sequences over ranks.
"""
import copy
import os
import random
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import torch
import torch.distributed as dist

from launcher.contract.errors import DamagedCheckpointError
from launcher.contract.messages import TrainShard
from launcher.contract.spec import ActorSpec
from launcher.plan.sync import SyncKind
from launcher.workers.batch import MicroBatch, micro_batches
from launcher.workers.hf import lora
from launcher.workers.hf.compute import logits_of, target_logprobs
from launcher.workers.hf.indexer_topk import IndexerReplay, pools_per_query
from launcher.workers.hf.model import VISION_PREFIX, build_model, language_items, language_state
from launcher.workers.hf.names import checkpoint_items
from launcher.workers.hf.routing import RouteReplay, routes_grid
from launcher.workers.indexer_picks import picks_grid
from launcher.workers.integrity import has_record, mismatch, read_records, write_record
from launcher.workers.registry import TRAINERS
from launcher.workers.trainer_base import TrainerBase, clip_grad_norm, tagged

MAX_REASON_CHARS = 120
"""Of torch.load's own message, in a damaged file's error (the rest is advice on pickles)."""


def _threads_from_env() -> None:
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@TRAINERS.register("hf")
class HfTrainer(TrainerBase):
    def __init__(self, spec: ActorSpec):
        _threads_from_env()
        super().__init__(spec)
        config = spec.config
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.progress.phase("reading checkpoint" if config.model.hf_path else f"random init on {self.device.type}")
        model = build_model(config.model, self.pad_id, config.run.seed, self.device)
        self.progress.phase("LoRA, reference, optimizer")
        self.ref = copy.deepcopy(model).eval() if self._keeps_frozen_ref else None
        self.model = (lora.wrap(model, self.lora) if self.lora else model).to(self.device)  # peft's adapters too
        self.runner = self.model
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        alg = config.algorithm
        self.route_replay = (RouteReplay(self.model, replay=alg.routing_replay)
                             if alg.routing_replay or alg.routing_agreement else None)
        """Hooks on the MoE gates: the engines' routes replayed (routing_replay) or only compared."""
        if self.route_replay is not None and not self.route_replay.gates:
            raise ValueError("algorithm.routing_replay / routing_agreement: the model has no MoE router to replay "
                             "(ROUTE001)")
        self.indexer_replay = (IndexerReplay(self.model, replay=alg.indexer_replay)
                               if alg.indexer_replay or alg.indexer_agreement else None)
        """Hooks on the DSA indexers: the engines' pools replayed (indexer_replay) or only compared."""
        if self.indexer_replay is not None and not self.indexer_replay.indexers:
            raise ValueError("algorithm.indexer_replay / indexer_agreement: the model has no DSA indexer (ROUTE005)")
        opt = config.trainer.optimizer
        self.optimizer = torch.optim.AdamW(self.params, lr=opt.lr, weight_decay=opt.weight_decay)
        self.progress.phase("ready")

    def init_distributed(self, master_addr: str, master_port: int) -> None:
        """The data-parallel group, every rank starting from rank 0's weights."""
        if self.world == 1:
            return
        self._join_process_group(master_addr, master_port)
        for param in self.model.parameters():
            dist.broadcast(param.data, src=0)

    def _micro_batches(self, shard: TrainShard) -> list[MicroBatch]:
        return micro_batches(shard.sequences, shard.prompt_lens, self.pad_id, self.cfg.trainer.max_tokens_per_microbatch)

    def _logp_grid(self, model, mb: MicroBatch, with_entropy: bool):
        logits_BTV = logits_of(model, mb.ids_BT.to(self.device))
        return target_logprobs(logits_BTV, mb.ids_BT.to(self.device), self.temperature, with_entropy)

    def _routes(self, shard: TrainShard, batch: MicroBatch, count: bool) -> AbstractContextManager:
        stack = ExitStack()
        width = batch.ids_BT.shape[1]
        if self.route_replay is not None and shard.routes is not None:
            gates = self.route_replay.gates
            grid = routes_grid(shard.routes, batch.rows, shard.sequences, width, len(gates), gates[0].top_k)
            stack.enter_context(self.route_replay.active(grid, count))
        if self.indexer_replay is not None and shard.indexer_topk is not None:
            found = self.indexer_replay.indexers
            grid, has = picks_grid(shard.indexer_topk, batch.rows, shard.sequences, width, len(found),
                                   pools_per_query(found[0]))
            stack.enter_context(self.indexer_replay.active(grid, has, count))
        return stack

    def _route_counts(self) -> dict[str, float]:
        counts = self.route_replay.counts() if self.route_replay is not None else {}
        return counts | (self.indexer_replay.counts() if self.indexer_replay is not None else {})

    def _adapters_off(self) -> AbstractContextManager:
        return self.model.disable_adapter()

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=False)

    def _step(self) -> float:
        self._all_reduce_grads()
        grad_norm = clip_grad_norm(self.params, self.cfg.trainer.optimizer.grad_clip)
        self.optimizer.step()
        return grad_norm

    def _all_reduce_grads(self) -> None:
        for param in self.params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        if self.world == 1:
            return
        flat = torch.cat([p.grad.reshape(-1) for p in self.params])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for param in self.params:
            param.grad.copy_(flat[offset: offset + param.numel()].view_as(param))
            offset += param.numel()

    def _weight_stream(self, with_base: bool) -> Iterator[tuple[str, str, torch.Tensor]]:
        """For the engines (StreamedExport): the model, the LoRA-merged model, or the
        adapter (after its frozen base when `with_base`), one tensor at a time, under the
        checkpoint's names (what every engine loads)."""
        if self.lora is None:
            yield from tagged("weights", checkpoint_items(self.model, language_items(self.model)))
            return
        base = self.model.get_base_model()
        if self.sync_kind is SyncKind.merged:
            yield from tagged("weights", checkpoint_items(base, lora.merged_items(self.model, VISION_PREFIX)))
            return
        if with_base:
            merged = lora.merged_items(self.model, VISION_PREFIX, with_delta=False)
            yield from tagged("weights", checkpoint_items(base, merged))
        yield from tagged("adapter", lora.checkpoint_adapter(self.model))

    def save_checkpoint(self, path: str, async_write: bool = False) -> None:
        """Rank 0: weights (or adapter) and optimizer; every rank: its RNG states and its
        integrity record of them (workers/integrity.py). All of it loads with
        torch.load(weights_only=True) (Python's RNG state is a tuple of ints). Written at
        once whatever `async_write` says: the hf backend's models are small."""
        os.makedirs(path, exist_ok=True)
        written = [os.path.join(path, f"rng_rank{self.rank}.pt")]
        if self.rank == 0:
            weights = lora.adapter_state(self.model) if self.lora else language_state(self.model)
            written += [os.path.join(path, "model.pt"), os.path.join(path, "optimizer.pt")]
            torch.save(_to_cpu(weights), written[1])
            torch.save(self.optimizer.state_dict(), written[2])
        torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, written[0])
        write_record(path, self.rank, [Path(f) for f in written])

    def finalize_checkpoint(self) -> float:
        """Nothing runs in the background here (save_checkpoint writes at once)."""
        return 0.0

    def checkpoint_written(self) -> bool:
        """Always: save_checkpoint wrote everything before it returned."""
        return True

    def load_checkpoint(self, path: str) -> str | None:
        """Raises DamagedCheckpointError naming the file when one is missing, cut short, not
        a checkpoint tensor file, or not what its writer recorded. Returns a note for the
        driver when the checkpoint predates the integrity record (its files go unchecked)."""
        note = _check_record(path, self.rank)
        weights = _read(os.path.join(path, "model.pt"), self.device)
        if self.lora:
            lora.load_adapter(self.model, weights)
        else:
            missing = [k for k in self.model.load_state_dict(weights, strict=False).missing_keys
                       if not k.startswith(VISION_PREFIX)]
            if missing:
                raise DamagedCheckpointError(f"{os.path.join(path, 'model.pt')} lacks weights {missing[:5]}")
        self.optimizer.load_state_dict(_read(os.path.join(path, "optimizer.pt"), self.device))
        rng_file = os.path.join(path, f"rng_rank{self.rank}.pt")
        if os.path.exists(rng_file):  # absent when the run had fewer ranks
            rng = _read(rng_file, torch.device("cpu"))
            torch.set_rng_state(rng["torch"])
            random.setstate(rng["python"])
        return note

    def offload(self) -> None:
        """Colocation: free the device for the engines (a no-op when the device is the CPU)."""
        self._move(torch.device("cpu"))

    def onload(self) -> None:
        self._move(self.device)

    def _move(self, device: torch.device) -> None:
        if self.device.type == "cpu":
            return
        self.model.to(device)
        for state in self.optimizer.state.values():
            for key, value in state.items():
                if torch.is_tensor(value):
                    state[key] = value.to(device)
        if device.type == "cpu":
            torch.cuda.empty_cache()


def _to_cpu(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu") for k, v in tensors.items()}


def _check_record(path: str, rank: int) -> str | None:
    """The files this rank reads against the integrity record of the rank that wrote each
    (rank 0: model and optimizer; each rank its RNG states, absent when the run had fewer
    ranks); DamagedCheckpointError naming the first that differs."""
    if not has_record(path):
        return f"{path}: no integrity record (written before it existed): its files are not checked"
    writers = {"model.pt": 0, "optimizer.pt": 0}
    if os.path.exists(os.path.join(path, f"rng_rank{rank}.pt")):
        writers[f"rng_rank{rank}.pt"] = rank
    listed, problems = read_records(path, sorted(set(writers.values())))
    for name, writer in writers.items():
        if name not in listed:
            problems.append(f"{Path(path) / name} is not in the integrity record of rank {writer}")
        elif (problem := mismatch(Path(path) / name, listed[name])) is not None:
            problems.append(problem)
    if problems:
        raise DamagedCheckpointError(problems[0])
    return None


def _read(file: str, device: torch.device):
    """torch.load, whose errors (zip reader, unpickler, EOF) never name the file, naming it:
    one line with the start of torch's first (a damaged file gets long, off-target advice)."""
    try:
        return torch.load(file, map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001 - any failure to read it makes the checkpoint unusable
        lines = str(err).strip().splitlines()
        detail = f": {lines[0][:MAX_REASON_CHARS]}" if lines else ""
        raise DamagedCheckpointError(f"{file} is damaged or unreadable ({type(err).__name__}{detail})") from None
