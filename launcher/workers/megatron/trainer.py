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
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist

from launcher.contract.protocols import TrainShard, WeightUpdate
from launcher.contract.spec import ActorSpec
from launcher.rl.algorithm import make_algorithm
from launcher.rl.tokenizer import make_tokenizer
from launcher.workers.batch import ungrid
from launcher.workers.hf.lora import lora_kwargs
from launcher.workers.loss import micro_loss
from launcher.workers.megatron import checkpoint
from launcher.workers.megatron import model as megatron_model
from launcher.workers.megatron._export import adapter_tensors
from launcher.workers.megatron._pack import pack_shard
from launcher.workers.megatron.state import DeviceMover, lora_disabled
from launcher.workers.registry import TRAINERS
from launcher.workers.rendezvous import free_address
from launcher.workers.stream import StreamedExport
from model.megatron import token_logprobs
from model.megatron.entropy import token_entropy
from model.megatron.optim import reduce_grads, sum_grads_without_ddp
from model.megatron.parallel import tp_size
from model.megatron.weights import hf_stream


@TRAINERS.register("megatron")
class MegatronTrainer(StreamedExport):
    def __init__(self, spec: ActorSpec):
        config = spec.config
        self.cfg, self.rank, self.world, self.mesh = config, spec.rank, spec.world, spec.plan.mesh
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        self.pad_id = make_tokenizer(config.model).pad_id
        self.algorithm = make_algorithm(config.algorithm)
        self.temperature = config.algorithm.temperature
        self.lora = lora_kwargs(config.trainer.lora) if config.trainer.lora.rank > 0 else None

    def pid(self) -> int:
        return os.getpid()

    def master_address(self) -> tuple[str, int]:
        """This rank's address and a free port, for rank 0 to host the process group."""
        return free_address()

    def init_distributed(self, master_addr: str, master_port: int) -> None:
        """Process group, Megatron's TP/EP groups, the model and its optimizer.

        Every group gets trainer.nccl_timeout_s: the world group here, Megatron's subgroups
        from it (build.init_parallel takes the world group's timeout)."""
        import datetime

        if not dist.is_initialized():
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            dist.init_process_group(backend, init_method=f"tcp://{master_addr}:{master_port}", rank=self.rank,
                                    world_size=self.world,
                                    timeout=datetime.timedelta(seconds=self.cfg.trainer.nccl_timeout_s))
        self.model = megatron_model.build_rank_model(self.cfg, self.mesh, self.device, self.pad_id)
        self.ref = None
        if self.algorithm.kl_coef > 0 and self.lora is None:
            self.ref = megatron_model.build_rank_model(self.cfg, self.mesh, self.device, self.pad_id).eval()
            self.ref.load_state_dict(self.model.state_dict())
        self.runner, self.optimizer, self.megatron_ddp = megatron_model.build_optimizer(self.model, self.cfg, self.mesh,
                                                                                         self.device)
        self.dp = megatron_model.data_parallel_size()
        self.mover = DeviceMover(self.model, *((self.runner, self.optimizer) if self.megatron_ddp else ()),
                                 optimizer_on_host=self.cfg.trainer.optimizer.cpu_offload)

    def _batches(self, shard: TrainShard):
        return pack_shard(shard.sequences, shard.prompt_lens, self.pad_id, self.cfg.trainer.max_tokens_per_microbatch,
                          tp_size(), self.device)

    def _logp_grid(self, model, batch, with_entropy: bool):
        logits_TVl = model(batch.ids_T, batch.packed)
        logp_T = token_logprobs(logits_TVl, batch.ids_T.roll(-1), self.temperature)
        entropy = batch.to_grid(token_entropy(logits_TVl, self.temperature)) if with_entropy else None
        return batch.to_grid(logp_T), entropy

    @torch.no_grad()
    def logprobs(self, shard: TrainShard) -> list[list[float]]:
        self.model.eval()
        out: list[list[float]] = [[] for _ in shard.sequences]
        for batch in self._batches(shard):
            logp_BT, _ = self._logp_grid(self.model, batch, with_entropy=False)
            for r, values in zip(batch.rows, ungrid(logp_BT.cpu(), batch, shard.prompt_lens, shard.sequences), strict=True):
                out[r] = values
        return out

    @torch.no_grad()
    def _ref_logprobs(self, batch) -> torch.Tensor:
        if self.ref is not None:
            return self._logp_grid(self.ref, batch, with_entropy=False)[0]
        with lora_disabled(self.model):
            return self._logp_grid(self.model, batch, with_entropy=False)[0]

    def _micro_loss(self, shard: TrainShard, batch):
        logp_BT, entropy_BT = self._logp_grid(self.runner, batch, with_entropy=True)
        return micro_loss(self.algorithm, shard, batch, logp_BT, entropy_BT, lambda: self._ref_logprobs(batch))

    def train_step(self, shard: TrainShard) -> dict[str, float]:
        """One optimizer step on this rank's share of a mini-batch; returns summed statistics."""
        self.model.train()
        self._zero_grad()
        sums = {"loss": 0.0, "tokens": 0.0}
        for batch in self._batches(shard):
            loss, stats = self._micro_loss(shard, batch)
            (loss * self.dp if self.megatron_ddp else loss).backward()
            sums["loss"] += float(loss.detach())
            sums["tokens"] += float(batch.mask_BT.sum())
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + float(value)
        sums["grad_norm"] = self._step()
        return sums

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
        params = [p for p in self.model.parameters() if p.requires_grad]
        clip = self.cfg.trainer.optimizer.grad_clip
        grad_norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
        self.optimizer.step()
        return float(grad_norm)

    def _update_header(self, version: int, with_base: bool) -> WeightUpdate:
        adapter = self.lora if self.lora is not None and not self.cfg.trainer.lora.merge else None
        return WeightUpdate(version, adapter=adapter, with_base=with_base and adapter is not None)

    def _weight_stream(self, with_base: bool) -> Iterator[tuple[str, str, torch.Tensor]]:
        """For the engines (StreamedExport): HF-named weights (LoRA merged), or the adapter
        after its frozen base when `with_base`; every tensor a gather across the mesh."""
        lora = self.cfg.trainer.lora
        if self.lora is None or lora.merge:
            yield from (("weights", name, t) for name, t in hf_stream(self.model, merged=True))
            return
        if with_base:
            yield from (("weights", name, t) for name, t in hf_stream(self.model, merged=False))
        adapter = adapter_tensors(self.model, lora.rank, lora.alpha)  # a few hundred MB at most: whole
        yield from (("adapter", name, t) for name, t in adapter.items())

    def save_checkpoint(self, path: str, async_write: bool = False) -> dict:
        """This rank's part of a sharded, reshardable checkpoint (checkpoint.py: weights or LoRA
        adapters, optimizer states, RNG); every rank calls it. With `async_write` it returns
        once the tensors are copied to host memory and a thread writes them: the checkpoint is
        complete only after finalize_checkpoint() on every rank. Returns blocked_s (training
        waited), write_s (None while an async write runs) and bytes this rank writes."""
        self.finalize_checkpoint()
        stats, self._pending_write = checkpoint.save(path, self.model, self.optimizer, checkpoint.identity(self.cfg),
                                                      async_write)
        return stats

    def finalize_checkpoint(self) -> float:
        """Wait for this rank's async checkpoint write (if any); seconds it took (0.0: none)."""
        pending, self._pending_write = getattr(self, "_pending_write", None), None
        return pending.wait() if pending is not None else 0.0

    def load_checkpoint(self, path: str) -> str | None:
        """Any mesh's checkpoint of this run into this rank (a collective). Raises
        checkpoint.CheckpointError (damaged or missing file, named) or CheckpointMismatchError
        (another base model, LoRA settings or kind). Returns what changed when the
        checkpoint was written on another mesh (None when it was this one)."""
        self.finalize_checkpoint()
        saved = checkpoint.load(path, self.model, self.optimizer, checkpoint.identity(self.cfg))
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

