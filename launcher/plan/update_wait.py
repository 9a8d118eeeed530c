"""How long an async run's weight update waits at an engine before it applies
(`inference.update_mode`), for the plan's origins (`timing.update_wait_s`).

- between_chunks: the update is queued behind the chunks already sent to the engine, up to
  IN_FLIGHT_PER_ENGINE of them, each as long as its longest sequence: at worst that many
  waves of max_response_len decode steps. Samples finished meanwhile are one version staler.
- in_flight: the chunk being generated pauses at its next token boundary: one decode step.

Either way a held-out evaluation request sent before the update runs first (evaluate.py).
"""
import math

from launcher.config.schema.choices import PlacementMode, UpdateMode
from launcher.plan.timing import TimingPlan

IN_FLIGHT_PER_ENGINE = 2
"""launcher/driver/loop_async.py IN_FLIGHT_PER_ENGINE (the plan layer cannot import the driver)."""


def chunk_s(cfg, timing: TimingPlan) -> float:
    """One async chunk: half a step's groups spread over the engines (loop_async._Generator),
    in waves of the engine's concurrency, each wave max_response_len decode steps."""
    alg, inf = cfg.algorithm, cfg.inference
    groups = max(1, min(-(-max(alg.prompts_per_step // 2, 1) // max(inf.engines, 1)),
                        inf.concurrency_per_engine // alg.samples_per_prompt))
    waves = math.ceil(groups * alg.samples_per_prompt / max(min(inf.concurrency_per_engine, inf.max_num_seqs), 1))
    return waves * alg.max_response_len * timing.decode_step_s


def update_wait_s(cfg, timing: TimingPlan) -> tuple[float, str] | None:
    """(seconds, how derived) of the wait, or None outside async placement."""
    if cfg.placement.mode is not PlacementMode["async"]:
        return None
    if cfg.inference.update_mode is UpdateMode.in_flight:
        return timing.decode_step_s, "in flight: the chunk pauses at its next token boundary (one decode step)"
    chunk = chunk_s(cfg, timing)
    return IN_FLIGHT_PER_ENGINE * chunk, (f"between chunks: behind up to {IN_FLIGHT_PER_ENGINE} queued chunks of "
                                          f"{chunk:.1f} s (max_response_len {cfg.algorithm.max_response_len} decode "
                                          "steps each, the longest sequence's)")
