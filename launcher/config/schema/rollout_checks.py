"""`run.rollout_checks:` what stops a run whose rollouts went wrong instead of training on them
(launcher/driver/loop/rollout_health.py): the canary, and bounds on the per-step degeneration and
trainer-vs-engine mismatch metrics."""
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Bound:
    warn: Optional[float] = None
    """Past this value (>) the console warns once, naming the metric, the step and what to check; null = never."""
    stop: Optional[float] = None
    """Past this value (>) for rollout_checks.stop_after_steps steps in a row the run stops (exit 3) before
    training on the last of them; null = never."""


@dataclass
class CanaryConfig:
    prompts: int = 4
    """Fixed prompts (the run's first training problems, in its template) that every engine generates with a fixed
    seed after every wake (colocated: before the step trains) or at start-up and after every weight update (async),
    and the trainer scores; 0 = no canary, >= 0."""
    max_tokens: int = 16
    """Response tokens per canary prompt (capped at algorithm.max_response_len), >= 1."""
    max_gap: float = 0.5
    """Largest mean |engine - trainer| log-prob (nats per token) over the canary's tokens, > 0. A healthy engine
    is within the run's own mismatch (bf16 random-init GLM slice on the H200: 0.13 per step; fp32 on CPU ~1e-5);
    wrong weights, names, dtypes or recurrent state after a wake give whole nats."""
    relative_to_first: float = 10.0
    """Colocated loop: a check also fails past this multiple of the launch's first canary gap plus 0.1 nats
    (driver/loop/canary.py BASELINE_MARGIN), when that is lower than max_gap: engine and trainer hold the same weights
    at every check there, so a small model's corruption that stays under max_gap still shows; 0 = off, >= 0."""


@dataclass
class RolloutChecksConfig:
    canary: CanaryConfig = field(default_factory=CanaryConfig)
    """The engine-vs-trainer canary: the run stops (exit 3) before training on a rollout whose engine fails it."""
    stop_after_steps: int = 2
    """Steps in a row past a `stop` bound that stop the run, >= 1 and <= run.steps (the default 2 also in a
    one-step run, where it never stops it)."""
    repeat_ngram_frac: Bound = field(default_factory=lambda: Bound(warn=0.3, stop=0.8))
    """Share of the step's response 4-grams seen earlier in the same response (loops)."""
    collapse_frac: Bound = field(default_factory=lambda: Bound(warn=0.05, stop=0.5))
    """Share of the step's responses that end in one id repeated over >= 8 tokens and half the response."""
    truncated_frac: Bound = field(default_factory=Bound)
    """Share of responses cut at algorithm.max_response_len: no default, an untrained policy truncates nearly all."""
    nonfinite_logprobs: Bound = field(default_factory=lambda: Bound(warn=0.0, stop=0.0))
    """NaN or infinite engine log-probs in the step (a count): any is a broken kernel or state."""
    logprob_abs_diff_mean: Bound = field(default_factory=lambda: Bound(warn=0.25, stop=1.0))
    """Mean |trainer old - engine| log-prob of the step's tokens (bf16 random-init GLM slice on the H200: <= 0.13)."""
    rollout_kl: Bound = field(default_factory=lambda: Bound(warn=0.1, stop=0.5))
    """k3 estimate of KL(engine || trainer) per token (same slice: <= 0.06); async runs add their staleness's drift."""
