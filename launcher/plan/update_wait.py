"""How long an async run's weight update waits at an engine before it applies
(`inference.update_mode`), for the plan's origins (`timing.update_wait_s`).

- between_chunks: the update is queued behind the chunks already sent to the engine, up to
  LoopPlan.chunks_in_flight_per_engine of them (plan/loop.py), each as long as its longest sequence: at worst that many
  waves of max_response_len decode steps. Samples finished meanwhile are one version staler.
- in_flight: the chunk being generated pauses at its next token boundary: one decode step.

Either way a held-out evaluation request sent before the update runs first (evaluate.py).
"""
import math

from launcher.plan.loop import LoopPlan
from launcher.plan.timing import TimingPlan


def chunk_s(cfg, loop: LoopPlan, timing: TimingPlan) -> float:
    """One async chunk (loop.chunk_groups groups) in waves of the engine's concurrency, each
    wave max_response_len decode steps."""
    alg, inf = cfg.algorithm, cfg.inference
    waves = math.ceil(loop.chunk_groups * alg.samples_per_prompt
                      / max(min(inf.concurrency_per_engine, inf.max_num_seqs), 1))
    return waves * alg.max_response_len * timing.decode_step_s


def update_wait_s(cfg, loop: LoopPlan, timing: TimingPlan) -> tuple[float, str] | None:
    """(seconds, how derived) of the wait, or None outside async placement."""
    if not loop.is_async:
        return None
    if loop.in_flight_updates:
        return timing.decode_step_s, "in flight: the chunk pauses at its next token boundary (one decode step)"
    chunk, queued = chunk_s(cfg, loop, timing), loop.chunks_in_flight_per_engine
    return queued * chunk, (f"between chunks: behind up to {queued} queued chunks of "
                                          f"{chunk:.1f} s (max_response_len {cfg.algorithm.max_response_len} decode "
                                          "steps each, the longest sequence's)")
