"""The rollout canary: a few fixed prompts every engine generates after the first sync and
after each wake (colocated) or weight update (async), scored by the trainer on the same
tokens. An engine whose weights or state went wrong (a sync that missed a name, a wrong
dtype or shard, a kernel gone non-finite, recurrent state remapped with garbage on wake)
samples tokens its trainer finds improbable by whole nats; a healthy one stays within the
run's own bf16 mismatch. The run stops (exit 3) before training on such a rollout.

The prompts are the run's own first training problems in its template; each engine gets the
same request with a fixed seed, at the run's temperature: the engine's log-probs are then
the same quantity as every sample's behaviour log-probs, which the trainer's are compared
with each step (`logprob_abs_diff_mean`). Greedy decoding would compare two argmaxes whose
log-probs each engine computes its own way at temperature 0.

Sync loop: the engines generate right after the wake, the trainer scores once it holds the
GPUs again, before it trains on the step (`collect` then `score`). Async loop: the request
goes behind each weight update, like a held-out evaluation (evaluate.py), and is scored when
it is back: the trainer may have taken one more step by then, which the bound allows for
(that step's drift is what `logprob_abs_diff_mean` reads there too).
"""
import math
import time
from dataclasses import dataclass

from launcher.config.schema.choices import PlacementMode
from launcher.contract.messages import GenerationRequest, SamplingParams
from launcher.driver.loop.train import trainer_logprobs

CANARY_SEED = 0xCA7A_27
"""The canary requests' sampling seed: the same tokens on every check of unchanged weights."""
WORST_TOKENS = 5
"""Tokens with the largest gaps the failure names."""
BASELINE_MARGIN = 0.1
"""Nats a check may exceed relative_to_first x the first gap by: bf16 engines drift that much
between checks of healthy weights (the random-init GLM slice's per-step gap ranged to 0.13 on
the H200); fp32 ones agree to ~1e-7, so on CPU this margin is the whole bound."""


class RolloutCheckError(RuntimeError):
    """A rollout check (canary or bound, run.rollout_checks) failed: the run stops with exit 3."""


@dataclass
class CanaryResult:
    phase: str
    mean_gap: float
    max_gap: float
    tokens: int
    worst: list[tuple[int, int, int, float, float]]
    """(engine, sequence, token id, engine log-prob, trainer log-prob) of the largest gaps."""


class Canary:
    def __init__(self, rt):
        cfg = rt.config.run.rollout_checks.canary
        alg = rt.config.algorithm
        self.rt, self.max_gap = rt, cfg.max_gap
        colocated = rt.config.placement.mode is PlacementMode.colocated
        self.relative = cfg.relative_to_first if colocated else 0.0
        self.baseline: float | None = None
        """This launch's first canary gap (the colocated loop's relative bound, limit())."""
        problems = rt.stream.take(0, cfg.prompts)  # the stream's first problems; draws nothing (no position)
        self.request = GenerationRequest(
            prompts=[rt.tokenizer.encode(p.prompt) for p in problems], seed=CANARY_SEED,
            sampling=SamplingParams(max_tokens=min(cfg.max_tokens, alg.max_response_len), temperature=alg.temperature,
                                    top_p=alg.top_p))
        self.sent: list[tuple[str, list]] = []
        """(phase, one ObjectRef per engine) of each canary sent and not yet scored, oldest first."""
        self.unlogged: dict = {}
        """The last scored canary's gap, for the next metrics row (take_row)."""

    def send(self, phase: str) -> None:
        """Every engine generates the canary (behind what it was asked before)."""
        self.sent.append((phase, [self.rt.engines.submit_to(e, self.request) for e in range(len(self.rt.engines))]))

    def ready(self) -> bool:
        """The oldest canary's answers are all back (the async loop scores only then: it never waits)."""
        return bool(self.sent) and len(self.rt.engines.wait_done(self.sent[0][1], timeout_s=0)) == len(self.sent[0][1])

    def drop(self) -> None:
        """A dropped step's canary (its requests were cancelled with the step's chunks)."""
        self.sent = []

    def take_row(self) -> dict:
        """canary_gap_mean / _max and canary_s (waiting for the engines' answers, then the trainer's
        scoring) of the last canary scored, once."""
        row, self.unlogged = self.unlogged, {}
        return row

    def score(self) -> CanaryResult | None:
        """The oldest canary sent: the trainer's log-probs of the tokens each engine sampled
        against the engine's own; RolloutCheckError past the bound (limit()). None when none was sent."""
        if not self.sent:
            return None
        phase, refs = self.sent.pop(0)
        started = time.monotonic()
        result = self._measure(phase, [self.rt.engines.result(ref) for ref in refs])
        self.unlogged = {"canary_gap_mean": result.mean_gap, "canary_gap_max": result.max_gap,
                         "canary_s": time.monotonic() - started}
        limit, basis = self.limit()
        if not math.isfinite(result.mean_gap) or result.mean_gap > limit:
            raise RolloutCheckError(_message(result, limit, basis))
        if self.baseline is None:
            self.baseline = result.mean_gap
        return result

    def limit(self) -> tuple[float, str]:
        """(the largest mean gap a check may have, where it comes from): canary.max_gap, and in the
        colocated loop also canary.relative_to_first x this launch's first gap + BASELINE_MARGIN
        (the engine and trainer hold the same weights at every check there; in the async loop the
        trainer may be an update ahead, so only max_gap holds)."""
        bound, basis = self.max_gap, f"run.rollout_checks.canary.max_gap={self.max_gap}"
        if self.relative and self.baseline is not None:
            relative = self.relative * self.baseline + BASELINE_MARGIN
            if relative < bound:
                bound, basis = relative, (f"run.rollout_checks.canary.relative_to_first={self.relative} x this run's "
                                          f"first canary gap {self.baseline:.3g} + {BASELINE_MARGIN}")
        return bound, basis

    def _measure(self, phase: str, gens: list) -> CanaryResult:
        seqs, prompt_lens, engine_lp, where, carried = [], [], [], [], {"routes": [], "indexer_topk": []}
        for e, gen in enumerate(gens):
            for s, (prompt, tokens) in enumerate(zip(self.request.prompts, gen.tokens, strict=True)):
                seqs.append(prompt + tokens)
                prompt_lens.append(len(prompt))
                engine_lp.append(gen.logprobs[s])
                where.append((e, s))
            for key in carried:
                carried[key] += getattr(gen, key) or []
        carried = {k: v for k, v in carried.items() if len(v) == len(seqs)}
        trainer_lp = trainer_logprobs(self.rt.trainers, seqs, prompt_lens, engine_lp, carried)
        return _compare(phase, seqs, prompt_lens, engine_lp, trainer_lp, where)


def _compare(phase, seqs, prompt_lens, engine_lp, trainer_lp, where) -> CanaryResult:
    gaps = []
    for (e, s), seq, start, mine, theirs in zip(where, seqs, prompt_lens, engine_lp, trainer_lp, strict=True):
        for token, a, b in zip(seq[start:], mine, theirs, strict=True):
            gap = abs(a - b) if math.isfinite(a) and math.isfinite(b) else math.inf
            gaps.append((gap, e, s, token, a, b))
    if not gaps:
        return CanaryResult(phase, 0.0, 0.0, 0, [])
    worst = sorted(gaps, key=lambda g: -g[0])[:WORST_TOKENS]
    return CanaryResult(phase, sum(g[0] for g in gaps) / len(gaps), worst[0][0], len(gaps),
                        [(e, s, token, a, b) for _, e, s, token, a, b in worst])


def _message(result: CanaryResult, bound: float, basis: str) -> str:
    worst = "; ".join(f"engine {e} prompt {s} token {t}: engine {a:.3f}, trainer {b:.3f}"
                      for e, s, t, a, b in result.worst)
    return (f"rollout canary failed at {result.phase}: the engine's log-probs of its own canary tokens differ from "
            f"the trainer's by {result.mean_gap:.3f} nats per token on average (max {result.max_gap:.3f}, "
            f"{result.tokens} tokens) where {bound:.3g} is allowed ({basis}); the run stopped here, before "
            f"training on another batch. Largest gaps: {worst}. Likely causes: weights not synced or synced under wrong names "
            f"(weight_sync), a dtype or shard mismatch between trainer and engine, a kernel returning wrong or "
            f"non-finite values, or the engine's KV/recurrent state left undefined by a wake (sleep level). "
            f"Check the start-up row and the step's logprob_abs_diff_mean in metrics.jsonl")
