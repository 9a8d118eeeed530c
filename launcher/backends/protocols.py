"""What the loops need from a trainer rank and from a generation engine.

Each trainer rank and each engine is one Ray actor built from a class registered under a
short name (`trainer.backend`, `inference.backend`). Everything crossing the actor
boundary is a plain dataclass of lists and CPU tensors, so any backend pair can talk.
"""
from dataclasses import dataclass, field
from typing import Protocol

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


@dataclass
class WeightUpdate:
    version: int
    tensors: dict[str, torch.Tensor]
    adapter: dict | None = None
    """None: `tensors` are full (merged) weights by model parameter name. Otherwise the
    LoRA config (peft LoraConfig kwargs) and `tensors` are the adapter's weights only."""
    base: dict[str, torch.Tensor] | None = None
    """Adapter sync only: frozen base weights to load first (first sync, after a resume)."""


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
    token's loss is weighted by pi_old / pi_rollout, truncated (grpo.IS_WEIGHT_CAP): it
    corrects the engine's lag in async mode and engine/trainer numeric mismatch in both."""
    stats: dict = field(default_factory=dict)


class TrainerBackend(Protocol):
    def init_distributed(self, master_addr: str, master_port: int) -> None: ...

    def logprobs(self, shard: TrainShard) -> list[list[float]]: ...

    def train_step(self, shard: TrainShard) -> dict[str, float]: ...

    def export_weights(self, version: int, with_base: bool) -> WeightUpdate: ...

    def save_checkpoint(self, path: str) -> None: ...

    def load_checkpoint(self, path: str) -> None: ...

    def offload(self) -> None: ...

    def onload(self) -> None: ...


class InferenceBackend(Protocol):
    def generate(self, request: GenerationRequest) -> Generation: ...

    def update_weights(self, update: WeightUpdate) -> None: ...

    def sleep(self, level: int) -> None: ...

    def wake(self) -> None: ...
