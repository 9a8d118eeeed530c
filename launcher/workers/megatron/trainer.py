"""The `megatron` trainer rank: GLM-5.3-Flash on megatron-core (model/megatron), packed
micro-batches, the same RL losses as the hf trainer.

Ranks of one TP group receive the same TrainShard (the TrainerGroup deals shards per
data-parallel rank). Each rank's loss is already divided by the whole mini-batch's
normaliser, so it is multiplied by the DP size before backward: Megatron's DDP averages
over DP, which then yields the sum the losses are built for (as the hf trainer's sum). On
CPU (no Megatron DDP) the grads are summed directly.
The weight export (begin_export / next_bucket, send_weights), save_checkpoint and
load_checkpoint gather or scatter shards: with more than one model-parallel rank they
must be called on every rank.
"""
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack

import torch

from launcher.contract.messages import TrainShard
from launcher.contract.spec import ActorSpec
from launcher.plan.sync import SyncKind
from launcher.workers.indexer_picks import as_pools
from launcher.workers.megatron import checkpoint
from launcher.workers.megatron import model as megatron_model
from launcher.workers.megatron._export import adapter_tensors
from launcher.workers.megatron._pack import PackedBatch, pack_shard
from launcher.workers.megatron.checkpoint_identity import identity
from launcher.workers.megatron.state import DeviceMover, lora_disabled
from launcher.workers.registry import TRAINERS
from launcher.workers.trainer_base import TrainerBase, tagged
from model.megatron import token_logprobs
from model.megatron.entropy import token_entropy
from model.megatron.indexer_slot import attach_indexer_slot, packed_picks
from model.megatron.moe import MoE
from model.megatron.optim import clip_grads_over_mesh, reduce_grads, sum_grads_without_ddp
from model.megatron.parallel import tp_size
from model.megatron.routes import attach_route_slot, packed_routes, rank_routes
from model.megatron.weights import hf_stream


@TRAINERS.register("megatron")
class MegatronTrainer(TrainerBase):
    def __init__(self, spec: ActorSpec):
        super().__init__(spec)
        self.plan, self.mesh = spec.plan, spec.plan.mesh
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")

    def init_distributed(self, master_addr: str, master_port: int) -> None:
        """Process group, Megatron's TP/EP groups, the model and its optimizer.

        Every group gets trainer.nccl_timeout_s: the world group here, Megatron's subgroups
        from it (build.init_parallel takes the world group's timeout)."""
        self.progress.phase("process group")
        self._join_process_group(master_addr, master_port)
        self.model = megatron_model.build_rank_model(self.cfg, self.plan, self.device, self.pad_id, self.progress)
        self.ref = None
        if self._keeps_frozen_ref:
            self.progress.phase("frozen reference copy")
            self.ref = megatron_model.build_rank_model(self.cfg, self.plan, self.device, self.pad_id).eval()
            self.ref.load_state_dict(self.model.state_dict())
        self.progress.phase("optimizer")
        self.runner, self.optimizer, self.megatron_ddp = megatron_model.build_optimizer(self.model, self.cfg, self.device)
        self.dp = megatron_model.data_parallel_size()
        self.mover = DeviceMover(self.model, *((self.runner, self.optimizer) if self.megatron_ddp else ()),
                                 optimizer_on_host=self.cfg.trainer.optimizer.cpu_offload)
        megatron_model.release_cached_blocks(self.device)
        self._attach_route_slot()
        self.progress.phase("ready")

    def _attach_route_slot(self) -> None:
        """algorithm.routing_replay / routing_agreement: one RouteSlot on every MoE block;
        indexer_replay / indexer_agreement: one IndexerSlot on every full DSA indexer."""
        alg = self.cfg.algorithm
        self.route_slot, self.moes = None, [m for m in self.model.modules() if isinstance(m, MoE)]
        if alg.routing_replay or alg.routing_agreement:
            self.route_slot = attach_route_slot(self.model, replay=alg.routing_replay)
        self.indexer_slot = None
        if alg.indexer_replay or alg.indexer_agreement:
            self.indexer_slot, self.indexed = attach_indexer_slot(self.model, replay=alg.indexer_replay)

    def _routes(self, shard: TrainShard, batch: PackedBatch, count: bool) -> AbstractContextManager:
        stack = ExitStack()
        if getattr(self, "route_slot", None) is not None and shard.routes is not None:
            grid = packed_routes(shard.routes, batch.rows, shard.sequences, batch.ids_T.shape[0], len(self.moes),
                                 self.moes[0].topk)
            stack.enter_context(self.route_slot.active(rank_routes(grid), count))
        if getattr(self, "indexer_slot", None) is not None and shard.indexer_topk is not None:
            stack.enter_context(self.indexer_slot.active(*self._given_pools(shard, batch), count))
        return stack

    def _given_pools(self, shard: TrainShard, batch: PackedBatch):
        """The engine's indexer pools over the micro-batch's whole packed stream (indexer_slot.py)."""
        indexer = self.indexed[0].indexer
        shape = (len(self.indexed), indexer.topk // indexer.kpool)
        pools = [as_pools(shard.indexer_topk[r], (len(shard.sequences[r]) - 1, *shape), r) for r in batch.rows]
        return packed_picks(pools, batch.ids_T.shape[0])

    def _route_counts(self) -> dict[str, float]:
        counts = self.route_slot.counts() if getattr(self, "route_slot", None) is not None else {}
        return counts | (self.indexer_slot.counts() if getattr(self, "indexer_slot", None) is not None else {})

    def _micro_batches(self, shard: TrainShard) -> list[PackedBatch]:
        return pack_shard(shard.sequences, shard.prompt_lens, self.pad_id, self.cfg.trainer.max_tokens_per_microbatch,
                          tp_size(), self.device)

    def _logp_grid(self, model, batch: PackedBatch, with_entropy: bool):
        logits_TVl = model(batch.ids_T, batch.packed)
        logp_T = token_logprobs(logits_TVl, batch.ids_T.roll(-1), self.temperature)
        entropy = batch.to_grid(token_entropy(logits_TVl, self.temperature)) if with_entropy else None
        return batch.to_grid(logp_T), entropy

    def _adapters_off(self) -> AbstractContextManager:
        return lora_disabled(self.model)

    def _backward(self, loss: torch.Tensor) -> None:
        """Megatron's DDP averages over DP ranks: scaling by the DP size turns that into the sum."""
        (loss * self.dp if self.megatron_ddp else loss).backward()

    def _zero_grad(self) -> None:
        if self.megatron_ddp:
            self.runner.zero_grad_buffer()
        self.optimizer.zero_grad()

    def _step(self) -> float:
        if self.megatron_ddp:
            reduce_grads(self.runner)
            _, grad_norm, _ = self.optimizer.step()
            return float(grad_norm or 0.0)
        sum_grads_without_ddp(self.model)
        grad_norm = clip_grads_over_mesh(self.model, self.cfg.trainer.optimizer.grad_clip)
        self.optimizer.step()
        return grad_norm

    def _weight_stream(self, with_base: bool) -> Iterator[tuple[str, str, torch.Tensor]]:
        """For the engines (StreamedExport): HF-named weights (LoRA merged), or the adapter
        after its frozen base when `with_base`; every tensor a gather across the mesh."""
        lora = self.cfg.trainer.lora
        if self.sync_kind is not SyncKind.adapter:
            yield from tagged("weights", hf_stream(self.model, merged=True))
            return
        if with_base:
            yield from tagged("weights", hf_stream(self.model, merged=False))
        adapter = adapter_tensors(self.model, lora.rank, lora.alpha)  # a few hundred MB at most: whole
        yield from tagged("adapter", adapter.items())

    def save_checkpoint(self, path: str, async_write: bool = False) -> dict:
        """This rank's part of a sharded, reshardable checkpoint (checkpoint.py: weights or LoRA
        adapters, optimizer states, RNG); every rank calls it. With `async_write` it returns
        once the tensors are copied to host memory and a thread writes them: the checkpoint is
        complete only after finalize_checkpoint() on every rank. Returns blocked_s (training
        waited), write_s (None while an async write runs) and bytes this rank writes."""
        self.finalize_checkpoint()
        stats, self._pending_write = checkpoint.save(path, self.model, self.optimizer, identity(self.cfg),
                                                      async_write)
        return stats

    def finalize_checkpoint(self) -> float:
        """Wait for this rank's async checkpoint write (if any); seconds it took (0.0: none)."""
        pending, self._pending_write = getattr(self, "_pending_write", None), None
        return pending.wait() if pending is not None else 0.0

    def checkpoint_written(self) -> bool:
        """Whether this rank's async checkpoint write is over (or none runs), without waiting:
        the driver completes the checkpoint at the first phase boundary after every rank's is."""
        pending = getattr(self, "_pending_write", None)
        return pending is None or pending.done()

    def load_checkpoint(self, path: str) -> str | None:
        """Any mesh's checkpoint of this run into this rank (a collective). Raises
        CheckpointError (damaged or missing file, named) or CheckpointMismatchError
        (another base model, LoRA settings or kind). Returns what changed when the
        checkpoint was written on another mesh (None when it was this one)."""
        self.finalize_checkpoint()
        saved = checkpoint.load(path, self.model, self.optimizer, identity(self.cfg))
        mesh = {"tp": self.mesh.tp, "ep": self.mesh.ep, "etp": self.mesh.etp, "dp": self.dp}
        if saved["mesh"] == mesh:
            return None
        old = " ".join(f"{k}{saved['mesh'].get(k)}" for k in mesh)
        return f"resharded: checkpoint written on {old} ({saved['world']} ranks), loaded on " + \
            " ".join(f"{k}{v}" for k, v in mesh.items()) + f" ({self.world} ranks)"

    def offload(self) -> None:
        """Colocation: weights and grad buffers to host memory (optimizer states stay; see state.py)."""
        self.mover.to_host()

    def onload(self) -> None:
        self.mover.to_device()

