"""What every trainer backend (hf, megatron) does the same way, written once.

The RL side of a trainer rank is backend-independent: log-probs over the shard's
micro-batches, the step's accumulation of losses and statistics, the KL reference, the
process-group rendezvous and the weight-update header. Backends differ only in how they
cut a shard into micro-batches, run a model over one, and reduce and apply the gradients;
those are the hooks below, so the two backends cannot drift apart in what they report.

A backend sets `device` (StreamedExport), `model` (the trained module), `ref` (a frozen
reference model, or None) and `runner` (the module the training forward runs through:
Megatron's DDP wrapper, or the model itself), and implements
  _micro_batches(shard) -> micro-batches with `rows` and `mask_BT` (batch.MicroBatch or
    megatron's PackedBatch);
  _logp_grid(module, batch, with_entropy) -> (logp_BT, entropy_BT or None) on the grid;
  _adapters_off() -> a context in which the LoRA adapters contribute nothing;
  _zero_grad(), and _step() -> the gradient norm (reduce, clip, optimizer step);
and overrides _backward(loss) where its gradient reduction needs the loss scaled, and
_routes(shard, batch, count) / _route_counts() where it replays the engines' MoE routes
and DSA indexer pools (algorithm.routing_replay, indexer_replay: hf/routing.py,
hf/indexer_topk.py, model/megatron/routes.py, model/megatron/indexer_slot.py).
Shapes: B sequences of a micro-batch, T target positions (batch.py's grid).
"""
import contextlib
import datetime
import operator
import os
from collections.abc import Iterable, Iterator

import torch
import torch.distributed as dist

from launcher.contract.messages import TrainShard
from launcher.contract.spec import ActorSpec
from launcher.plan.lora import adapter_kwargs
from launcher.plan.sync import SyncKind
from launcher.rl.algorithm import make_algorithm
from launcher.rl.tokenizer import make_tokenizer
from launcher.weight_sync.export import StreamedExport
from launcher.weight_sync.messages import WeightUpdate
from launcher.workers.batch import keep_model_tokens, ungrid
from launcher.workers.gpu_free import check_gpu_free
from launcher.workers.loss import micro_loss
from launcher.workers.progress import Progress
from launcher.workers.rendezvous import free_address

MAX_SUFFIX = "_max"
"""A statistic whose name ends so is a maximum over micro-batches (and ranks, train.py), not a sum."""


def tagged(kind: str, named: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, str, torch.Tensor]]:
    """(name, tensor) pairs as the (kind, name, tensor) triples of `_weight_stream`."""
    return ((kind, name, tensor) for name, tensor in named)


def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> float:
    """The total gradient norm before clipping; `max_norm` 0 (trainer.optimizer.grad_clip) only measures it."""
    return float(torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf")))


class TrainerBase(StreamedExport):
    def __init__(self, spec: ActorSpec):
        config = spec.config
        self.cfg, self.rank, self.world = config, spec.rank, spec.world
        self.pad_id = make_tokenizer(config.model).pad_id
        self.algorithm = make_algorithm(config.algorithm)
        self.temperature = config.algorithm.temperature
        self.lora = adapter_kwargs(config.trainer.lora, spec.plan.lora.expert_rank) if spec.plan.lora.enabled else None
        """peft LoraConfig arguments (shipped to the engines with an adapter), None for full fine-tuning."""
        self.sync_kind = spec.plan.sync.kind
        """What each weight sync ships (plan/sync.py): adapter, merged or full."""
        self.sync_transport = spec.plan.sync.transport
        """How it travels (plan/sync.py sync_transport; launcher/weight_sync/transports/)."""
        self.progress = Progress(spec.board, f"trainer rank {spec.rank}")
        """Start-up phases for the driver's board (progress.py); named as the driver's TrainerGroup labels it."""
        check_gpu_free(spec, "trainer", f"trainer rank {spec.rank}")

    @property
    def _keeps_frozen_ref(self) -> bool:
        """Whether the KL reference is a frozen copy of the model: KL on and full
        fine-tuning (with LoRA the model itself, adapters off, is the reference)."""
        return self.algorithm.kl_coef > 0 and self.lora is None

    def pid(self) -> int:
        return os.getpid()

    def master_address(self) -> tuple[str, int]:
        """This rank's address and a free port, for rank 0 to host the process group."""
        return free_address()

    def _join_process_group(self, master_addr: str, master_port: int) -> None:
        """The world group (once per process); a collective waiting longer than
        trainer.nccl_timeout_s fails."""
        if dist.is_initialized():
            return
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://{master_addr}:{master_port}",
                                rank=self.rank, world_size=self.world,
                                timeout=datetime.timedelta(seconds=self.cfg.trainer.nccl_timeout_s))

    @torch.no_grad()
    def logprobs(self, shard: TrainShard) -> list[list[float]]:
        self.model.eval()
        out: list[list[float]] = [[] for _ in shard.sequences]
        for batch in self._micro_batches(shard):
            with self._routes(shard, batch, count=False):
                logp_BT, _ = self._logp_grid(self.model, batch, with_entropy=False)
            for r, values in zip(batch.rows, ungrid(logp_BT.cpu(), batch, shard.prompt_lens, shard.sequences),
                                 strict=True):
                out[r] = values
        return out

    @torch.no_grad()
    def _ref_logprobs(self, batch) -> torch.Tensor:
        if self.ref is not None:
            return self._logp_grid(self.ref, batch, with_entropy=False)[0]
        with self._adapters_off():
            return self._logp_grid(self.model, batch, with_entropy=False)[0]

    def _routes(self, shard: TrainShard, batch, count: bool) -> contextlib.AbstractContextManager:
        """The engines' MoE routes and indexer pools of `batch` for the forwards inside
        (replayed, and counted for routing_agreement / indexer_agreement when `count`); a
        backend without replay support ignores them."""
        return contextlib.nullcontext()

    def _route_counts(self) -> dict[str, float]:
        """route_* and indexer_* pairs / agree / agree_own since the last call (hf/routing.py,
        hf/indexer_topk.py)."""
        return {}

    def _micro_loss(self, shard: TrainShard, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        with self._routes(shard, batch, count=True):
            logp_BT, entropy_BT = self._logp_grid(self.runner, batch, with_entropy=True)
        return micro_loss(self.algorithm, shard, batch, logp_BT, entropy_BT, lambda: self._ref_logprobs(batch))

    def train_step(self, shard: TrainShard) -> dict[str, float]:
        """One optimizer step on this rank's share of a mini-batch; returns summed statistics
        (those named `*_max` are maxima)."""
        self.model.train()
        self._zero_grad()
        sums = {"loss": 0.0, "tokens": 0.0}
        for batch in self._micro_batches(shard):
            keep_model_tokens(batch, shard)
            loss, stats = self._micro_loss(shard, batch)
            self._backward(loss)
            sums["loss"] += float(loss.detach())
            sums["tokens"] += float(batch.mask_BT.sum())
            for key, value in stats.items():
                combine = max if key.endswith(MAX_SUFFIX) else operator.add
                sums[key] = combine(sums[key], float(value)) if key in sums else float(value)
        sums.update(self._route_counts())
        sums["grad_norm"] = self._step()
        return sums

    def _backward(self, loss: torch.Tensor) -> None:
        """Each rank's loss is already divided by the whole mini-batch's normaliser, so
        summing the ranks' gradients gives the single-process gradient."""
        loss.backward()

    def _update_header(self, version: int, with_base: bool) -> WeightUpdate:
        adapter = self.lora if self.sync_kind is SyncKind.adapter else None
        return WeightUpdate(version, adapter=adapter, with_base=with_base and adapter is not None)
