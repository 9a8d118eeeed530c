"""What the loops send a generation engine and a trainer rank, and what comes back.

Each trainer rank and each engine is one Ray actor built from a class registered under a
short name (`trainer.backend`, `inference.backend`); the classes' common bases are the
backend interface (launcher/workers/trainer_base.py, launcher/workers/engine_base.py).
Everything crossing the actor boundary is a plain dataclass of lists and numpy arrays,
so any backend pair can talk. Weight sync has its own messages
(launcher/weight_sync/messages.py).
"""
from dataclasses import dataclass, field

import numpy as np


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
    in_flight: bool = False
    """A weight update may apply between this request's tokens (a training chunk with
    inference.update_mode: in_flight); False: the whole request runs on one version and an
    update waits for its end (held-out evaluation, and every request between_chunks)."""


@dataclass
class Generation:
    tokens: list[list[int]]
    logprobs: list[list[float]]
    """Per generated token, log-prob under the engine's policy at the sampling temperature."""
    finished: list[bool]
    """EOS reached (False: cut at max_tokens)."""
    policy_version: int
    """The oldest of token_versions: the version the request started on."""
    token_versions: list[list[int]]
    """Per generated token, the policy version of the weights that produced it; one version
    throughout unless the request was in flight (GenerationRequest.in_flight) across an update."""
    routes: list[np.ndarray] | None = None
    """Per sequence, the top-k expert ids the engine's router chose for each prompt and
    response token and MoE layer: uint16 [len(prompt) + len(tokens) - 1, moe_layers, top_k]
    (launcher/workers/hf/routing.py); None unless algorithm.routing_replay or
    routing_agreement. numpy arrays cross Ray's object store as buffers, not Python lists."""
    indexer_topk: list[np.ndarray] | None = None
    """Per sequence, the k-pools the engine's DSA indexer selected for each prompt and response
    token and indexer layer: uint16 [len(prompt) + len(tokens) - 1, indexer_layers,
    index_topk // index_kpool] (launcher/workers/hf/indexer_topk.py); None unless
    algorithm.indexer_replay or indexer_agreement."""


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
    indexer_topk: list[np.ndarray] | None = None
    """The engine's indexer top-k of each sequence (Generation.indexer_topk): replayed by the
    trainer's DSA indexer with algorithm.indexer_replay, compared for indexer_agreement."""
    loss_masks: list[list[bool]] | None = None
    """Multi-turn episodes: per sequence and response token, True where the model produced it;
    observation tokens (False) stay in the sequence and out of the loss (workers/batch.py
    keep_model_tokens). None: every response token is trained."""
    stats: dict = field(default_factory=dict)
