"""What the loops need from a trainer rank and from a generation engine.

Each trainer rank and each engine is one Ray actor built from a class registered under a
short name (`trainer.backend`, `inference.backend`). Everything crossing the actor
boundary is a plain dataclass of lists and CPU tensors (or CUDA IPC handles, which are
bytes and ints), so any backend pair can talk.

Weights travel as a stream (launcher/driver/weight_sync.py): a WeightUpdate header, then
size-bounded WeightBuckets that the driver forwards from trainer rank 0 to every engine
one after the other, so neither side nor Ray's object store ever holds the whole model.
"""
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch


@dataclass
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class GenerationRequest:
    prompts: list[list[int]]
    """One entry per sequence to sample (a group repeats its prompt)."""
    seed: int
    """Seeds the sampler: the same request samples the same tokens on any engine."""
    sampling: SamplingParams


@dataclass
class Generation:
    tokens: list[list[int]]
    logprobs: list[list[float]]
    """Per generated token, log-prob under the engine's policy at the sampling temperature."""
    finished: list[bool]
    """EOS reached (False: cut at max_tokens)."""
    policy_version: int
    """Version of the weights that produced every token of this request."""
    routes: list[np.ndarray] | None = None
    """Per sequence, the top-k expert ids the engine's router chose for each prompt and
    response token and MoE layer: uint16 [len(prompt) + len(tokens) - 1, moe_layers, top_k]
    (launcher/workers/hf/routing.py); None unless algorithm.routing_replay or
    routing_agreement. numpy arrays cross Ray's object store as buffers, not Python lists."""


@dataclass
class WeightUpdate:
    """Header of one streamed weight update; its WeightBuckets follow (weight_sync.py).

    An engine is told `begin_weight_update(update)`, then `load_weight_bucket(bucket)` for
    every bucket in order, then `finish_weight_update(update.version)`, and refuses to
    generate in between, so no request ever runs on a half-applied update."""

    version: int
    adapter: dict | None = None
    """None: the buckets are full (merged) weights by HF parameter name. Otherwise the
    LoRA config (peft LoraConfig kwargs) and the stream carries the adapter's weights."""
    with_base: bool = False
    """Adapter sync only: "weights" buckets of the frozen base come before the adapter
    (first sync, after a resume or a level-2 sleep)."""


@dataclass
class IpcBuffer:
    """A bucket's tensors packed back to back in one device buffer of trainer rank 0, shared
    by CUDA IPC handle (launcher/workers/ipc.py). The fields and their meaning are those of
    vLLM's packed IPCWeightTransferUpdateInfo, so vLLM's packed consumer reads it too."""

    names: list[str]
    dtype_names: list[str]
    """torch dtype names ("bfloat16")."""
    shapes: list[list[int]]
    tensor_sizes: list[int]
    """Bytes of each tensor, in buffer order (tensor i starts at the sum of those before it)."""
    ipc_handles: dict[str, tuple]
    """{physical GPU UUID: torch's reduce_tensor args of the buffer}: an engine opens the
    handle of its own GPU (rebuild_cuda_tensor) and copies device to device."""


@dataclass
class WeightBucket:
    """One size-bounded piece of a streamed weight update: HF-named CPU tensors, or (CUDA IPC
    transport) the same tensors as handles of a device buffer."""

    kind: str
    """"weights": model parameters (full or merged weights, or an adapter's frozen base),
    loaded as they arrive; "adapter": LoRA tensors (peft names), applied at finish."""
    tensors: list[tuple[str, torch.Tensor]]
    """Empty when `ipc` carries the bucket."""
    nbytes: int
    """Bytes of the bucket's tensors (the bucket bound applies to this; one larger tensor travels alone)."""
    last: bool = False
    """The update's final bucket (the trainer knows it without another call)."""
    ipc: IpcBuffer | None = None
    """Transport "cuda_ipc" (plan/sync.py bucket_transport): the tensors stay on trainer rank
    0's GPU and this names them; the trainer keeps the buffer until the engines are done."""

    def count(self) -> int:
        """Tensors in the bucket, whichever way they travel."""
        return len(self.ipc.names) if self.ipc is not None else len(self.tensors)


@dataclass
class BucketInfo:
    """What the driver reads about a bucket (it forwards the bucket itself unread)."""

    index: int
    kind: str
    tensors: int
    nbytes: int
    last: bool


@dataclass(frozen=True)
class EngineWait:
    """How long a trainer rank waits on each engine's step of a GPU weight transfer, and how
    it names them: derived by the driver (driver/deadlines.py), which alone holds the plan's
    phase estimates, so the transfer's inner waits have a deadline as the driver's do."""

    whos: list[str]
    """One per engine actor, in order: `engine 0 (pid 4243, node 0 GPU 1)`."""
    seconds: float
    basis: str
    """How `seconds` was derived, for the error."""


@dataclass
class TrainShard:
    """One trainer rank's share of one mini-batch (grpo.py's legend names the shapes)."""

    sequences: list[list[int]]
    prompt_lens: list[int]
    advantages: list[float]
    tokens_in_mini_batch: int
    """Response tokens in the whole mini-batch over all ranks (token_mean's normaliser)."""
    seqs_in_mini_batch: int
    """Sequences in the whole mini-batch over all ranks (sequence-mean normaliser)."""
    old_logprobs: list[list[float]] | None = None
    """Log-probs before this step's first update; None when the step has one mini-batch
    (then they equal the current ones and are taken from the same forward pass)."""
    rollout_logprobs: list[list[float]] | None = None
    """Engine log-probs of the response tokens (the behaviour policy). When given, each
    token's loss is weighted by pi_old / pi_rollout at token and sequence level, bounded as
    algorithm.off_policy says (launcher/rl/off_policy.py): it corrects the engine's lag in
    async mode and engine/trainer numeric mismatch in both."""
    routes: list[np.ndarray] | None = None
    """The engine's routes of each sequence (Generation.routes): replayed by the trainer with
    algorithm.routing_replay, compared with its own router's for routing_agreement."""
    stats: dict = field(default_factory=dict)


class TrainerBackend(Protocol):
    def init_distributed(self, master_addr: str, master_port: int) -> None: ...

    def logprobs(self, shard: TrainShard) -> list[list[float]]: ...

    def train_step(self, shard: TrainShard) -> dict[str, float]: ...

    def begin_export(self, version: int, with_base: bool, max_bucket_bytes: int,
                     transport: str = "host") -> WeightUpdate:
        """Start streaming this rank's weights for the engines (merged or full weights, or
        the adapter, preceded by its frozen base when `with_base`); returns the header.

        Nothing is materialised here: each `next_bucket` call gathers (model parallel:
        a collective, so every rank of the mesh calls both methods the same number of
        times), merges and copies to host only the tensors of one bucket of at most
        `max_bucket_bytes`. `transport` "cuda_ipc" (GPU, the engine on rank 0's GPU): rank 0
        packs each bucket into a device buffer and sends its CUDA IPC handle instead."""
        ...

    def release_export(self) -> None:
        """Every engine has loaded every bucket of the export: free the device buffers
        rank 0 still keeps for them (CUDA IPC transport; nothing to do for host buckets)."""
        ...

    def next_bucket(self) -> tuple[BucketInfo | None, WeightBucket | None]:
        """(info, bucket) of the next bucket (info.last on the final one); (None, None) past
        the end. Ranks other than 0 return (info, None): they take part in the gathers only."""
        ...

    def connect_weight_transfer(self, engines: list, master_address: str, master_port: int, wait: EngineWait) -> None:
        """GPU engines only (InferenceBackend.weight_transfer() is not None): build the
        trainer side of that transfer with the engine actors. Called on every rank. Each
        wait on the engines is bounded by `wait` (PeerLostError naming the engine)."""
        ...

    def send_weights(self, version: int, wait: EngineWait) -> None:
        """GPU engines only: push merged weights straight to the engines (rank 0 drives
        them; every rank joins the gathers), each wait on them bounded by `wait`. Returns
        once the engines serve `version`."""
        ...

    def save_checkpoint(self, path: str) -> None: ...

    def load_checkpoint(self, path: str) -> str | None:
        """A note the driver prints (what was resharded, what went unchecked), or None.
        Raises DamagedCheckpointError naming a damaged file, CheckpointMismatchError for
        another run's checkpoint."""
        ...

    def offload(self) -> None: ...

    def onload(self) -> None: ...


class InferenceBackend(Protocol):
    def generate(self, request: GenerationRequest) -> Generation: ...

    def begin_weight_update(self, update: WeightUpdate) -> None:
        """A streamed update starts: buckets follow, then finish_weight_update. Called
        between generate calls, never during one; the engine must not generate until finish."""
        ...

    def load_weight_bucket(self, bucket: WeightBucket) -> int:
        """Load (or, for adapter buckets, keep) one bucket and release it; returns its tensor count."""
        ...

    def finish_weight_update(self, version: int) -> None:
        """Every bucket has arrived: serve the new weights as `version` from the next generate."""
        ...

    def loaded_base(self) -> dict | None:
        """The checkpoint whose weights the engine serves now ({"hf_path", "sha256"},
        base_identity.checkpoint_base), None for a random init or after a level-2 sleep."""
        ...

    def weight_transfer(self) -> str | None:
        """The GPU transfer this engine was started for ("ipc" colocated, "nccl" async; the
        trainer then pushes merged weights itself), or None: weights arrive in buckets."""
        ...

    def sleep(self, level: int) -> None: ...

    def wake(self) -> None: ...
