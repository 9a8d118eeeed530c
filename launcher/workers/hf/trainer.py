"""The `hf` trainer rank: a transformers model trained with torch, gloo/NCCL data parallel.

Gradients are summed over ranks (not averaged): each rank's loss is already divided by
the whole mini-batch's normaliser (grpo.token_weights), so the sum is the exact
single-process gradient whatever the split of sequences over ranks.
"""
import copy
import datetime
import os
import random
from collections.abc import Iterator

import torch
import torch.distributed as dist

from launcher.contract.errors import DamagedCheckpointError
from launcher.contract.protocols import TrainShard, WeightUpdate
from launcher.contract.spec import ActorSpec
from launcher.rl.algorithm import make_algorithm
from launcher.rl.tokenizer import make_tokenizer
from launcher.workers.batch import micro_batches, ungrid
from launcher.workers.hf import lora
from launcher.workers.hf.compute import logits_of, target_logprobs
from launcher.workers.hf.model import VISION_PREFIX, build_model, language_items, language_state
from launcher.workers.hf.names import checkpoint_adapter_items, checkpoint_items
from launcher.workers.loss import micro_loss
from launcher.workers.registry import TRAINERS
from launcher.workers.rendezvous import free_address
from launcher.workers.stream import StreamedExport

MAX_REASON_CHARS = 120
"""Of torch.load's own message, in a damaged file's error (the rest is advice on pickles)."""


def _threads_from_env() -> None:
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@TRAINERS.register("hf")
class HfTrainer(StreamedExport):
    def __init__(self, spec: ActorSpec):
        _threads_from_env()
        config = spec.config
        self.cfg, self.rank, self.world = config, spec.rank, spec.world
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.pad_id = make_tokenizer(config.model).pad_id
        model = build_model(config.model, self.pad_id, config.run.seed)
        self.lora = lora.lora_kwargs(config.trainer.lora) if config.trainer.lora.rank > 0 else None
        # Full fine-tuning keeps a frozen copy as the KL reference; LoRA disables its adapters.
        self.ref = copy.deepcopy(model).eval() if config.algorithm.kl_coef > 0 and self.lora is None else None
        self.model = (lora.wrap(model, self.lora) if self.lora else model).to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        opt = config.trainer.optimizer
        self.optimizer = torch.optim.AdamW(self.params, lr=opt.lr, weight_decay=opt.weight_decay)
        self.algorithm = make_algorithm(config.algorithm)
        self.temperature = config.algorithm.temperature

    def pid(self) -> int:
        return os.getpid()

    def master_address(self) -> tuple[str, int]:
        """This rank's address and a free port, for rank 0 to host the process group."""
        return free_address()

    def init_distributed(self, master_addr: str, master_port: int) -> None:
        """The data-parallel group; a collective waiting longer than trainer.nccl_timeout_s fails."""
        if self.world == 1:
            return
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://{master_addr}:{master_port}",
                                rank=self.rank, world_size=self.world,
                                timeout=datetime.timedelta(seconds=self.cfg.trainer.nccl_timeout_s))
        for param in self.model.parameters():
            dist.broadcast(param.data, src=0)

    def _forward(self, model, mb, with_entropy: bool):
        logits_BTV = logits_of(model, mb.ids_BT.to(self.device))
        return target_logprobs(logits_BTV, mb.ids_BT.to(self.device), self.temperature, with_entropy)

    @torch.no_grad()
    def logprobs(self, shard: TrainShard) -> list[list[float]]:
        self.model.eval()
        out: list[list[float]] = [[] for _ in shard.sequences]
        for mb in micro_batches(shard.sequences, shard.prompt_lens, self.pad_id, self._budget()):
            logp_BT, _ = self._forward(self.model, mb, with_entropy=False)
            for r, values in zip(mb.rows, ungrid(logp_BT.cpu(), mb, shard.prompt_lens, shard.sequences), strict=True):
                out[r] = values
        return out

    def _budget(self) -> int:
        return self.cfg.trainer.max_tokens_per_microbatch

    @torch.no_grad()
    def _ref_logprobs(self, mb) -> torch.Tensor:
        if self.ref is not None:
            return self._forward(self.ref, mb, with_entropy=False)[0]
        with self.model.disable_adapter():
            return self._forward(self.model, mb, with_entropy=False)[0]

    def _micro_loss(self, shard: TrainShard, mb) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logp_BT, entropy_BT = self._forward(self.model, mb, with_entropy=True)
        return micro_loss(self.algorithm, shard, mb, logp_BT, entropy_BT, lambda: self._ref_logprobs(mb))

    def train_step(self, shard: TrainShard) -> dict[str, float]:
        """One optimizer step on this rank's share of a mini-batch; returns summed statistics."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=False)
        sums = {"loss": 0.0, "tokens": 0.0}
        for mb in micro_batches(shard.sequences, shard.prompt_lens, self.pad_id, self._budget()):
            loss, stats = self._micro_loss(shard, mb)
            loss.backward()
            sums["loss"] += float(loss.detach())
            sums["tokens"] += float(mb.mask_BT.sum())
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + float(value)
        self._all_reduce_grads()
        sums["grad_norm"] = float(self._clip())
        self.optimizer.step()
        return sums

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

    def _clip(self) -> torch.Tensor:
        max_norm = self.cfg.trainer.optimizer.grad_clip
        return torch.nn.utils.clip_grad_norm_(self.params, max_norm if max_norm > 0 else float("inf"))

    def _update_header(self, version: int, with_base: bool) -> WeightUpdate:
        adapter = self.lora if self.lora is not None and not self.cfg.trainer.lora.merge else None
        return WeightUpdate(version, adapter=adapter, with_base=with_base and adapter is not None)

    def _weight_stream(self, with_base: bool) -> Iterator[tuple[str, str, torch.Tensor]]:
        """For the engines (StreamedExport): the model, the LoRA-merged model, or the
        adapter (after its frozen base when `with_base`), one tensor at a time, under the
        checkpoint's names (what every engine loads)."""
        if self.lora is None:
            yield from _tagged("weights", checkpoint_items(self.model, language_items(self.model)))
            return
        base = self.model.get_base_model()
        if self.cfg.trainer.lora.merge:
            yield from _tagged("weights", checkpoint_items(base, lora.merged_items(self.model, VISION_PREFIX)))
            return
        if with_base:
            merged = lora.merged_items(self.model, VISION_PREFIX, with_delta=False)
            yield from _tagged("weights", checkpoint_items(base, merged))
        yield from _tagged("adapter", checkpoint_adapter_items(base, lora.adapter_state(self.model).items()))

    def save_checkpoint(self, path: str, async_write: bool = False) -> None:
        """Rank 0: weights (or adapter) and optimizer; every rank: its RNG states. All of it
        loads with torch.load(weights_only=True) (Python's RNG state is a tuple of ints).
        Written at once whatever `async_write` says: the hf backend's models are small."""
        os.makedirs(path, exist_ok=True)
        if self.rank == 0:
            weights = lora.adapter_state(self.model) if self.lora else language_state(self.model)
            torch.save(_to_cpu(weights), os.path.join(path, "model.pt"))
            torch.save(self.optimizer.state_dict(), os.path.join(path, "optimizer.pt"))
        torch.save({"torch": torch.get_rng_state(), "python": random.getstate()},
                   os.path.join(path, f"rng_rank{self.rank}.pt"))

    def finalize_checkpoint(self) -> float:
        """Nothing runs in the background here (save_checkpoint writes at once)."""
        return 0.0

    def load_checkpoint(self, path: str) -> None:
        """Raises DamagedCheckpointError naming the file when one is missing, cut short or
        not a checkpoint tensor file."""
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


def _tagged(kind: str, named) -> Iterator[tuple[str, str, torch.Tensor]]:
    return ((kind, name, tensor) for name, tensor in named)


def _to_cpu(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu") for k, v in tensors.items()}


def _read(file: str, device: torch.device):
    """torch.load, whose errors (zip reader, unpickler, EOF) never name the file, naming it:
    one line with the start of torch's first (a damaged file gets long, off-target advice)."""
    try:
        return torch.load(file, map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001 - any failure to read it makes the checkpoint unusable
        lines = str(err).strip().splitlines()
        detail = f": {lines[0][:MAX_REASON_CHARS]}" if lines else ""
        raise DamagedCheckpointError(f"{file} is damaged or unreadable ({type(err).__name__}{detail})") from None
