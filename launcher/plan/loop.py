"""The step loop's shape, derived once from the config: the driver runs exactly this shape
(driver/loop/loop_async.py, driver/loop/step.py, the engine group) and the planner prices it
(plan/update_wait.py, plan/routes.py), so neither can drift from the other.

- Async placement: engines generate all the time in chunks of half a step's groups spread
  over the engines (at most an engine's concurrency), up to CHUNKS_IN_FLIGHT_PER_ENGINE per
  engine; finished groups wait in a queue of QUEUE_STEPS steps' worth, never more than
  algorithm.max_staleness lets the trainer use.
- Colocated placement: each generation round cuts its own chunks (groups_per_chunk over the
  round's prompts); there is no queue.
- inference.update_mode in_flight: a weight update lands at a token boundary of the chunk
  being generated, so engines run chunks on a thread of their own (rules refuse it outside
  async placement).
"""
from dataclasses import dataclass

from launcher.config.schema.choices import PlacementMode, UpdateMode
from launcher.config.schema.root import LauncherConfig

CHUNKS_IN_FLIGHT_PER_ENGINE = 2
"""Enough for an engine never to idle between two chunks, few enough that a weight update
queued behind them (between_chunks) waits at most two chunks."""
QUEUE_STEPS = 2
"""Finished groups held for the trainer: a step being trained plus the next one ready."""


@dataclass
class LoopPlan:
    is_async: bool
    in_flight_updates: bool
    """inference.update_mode in_flight: generate calls run on the engine's own thread and a
    weight update pauses the chunk at its next token boundary (weight_sync/update_gate.py)."""
    chunk_groups: int
    """Async: whole groups per chunk. 0 colocated (each round cuts its own, groups_per_chunk)."""
    chunks_in_flight_per_engine: int
    """Async: chunks sent to an engine and not yet back, at most. 0 colocated."""
    queue_steps: int
    """Async: steps' worth of finished groups held for the trainer. 0 colocated."""
    queue_groups: int
    """Async: the queue's capacity in groups (queue_steps x prompts_per_step). 0 colocated."""


def groups_per_chunk(sequences_per_engine_cap: int, samples: int, n_groups: int, engines: int) -> int:
    """Whole groups per chunk: an even share per engine, at most the engine's concurrency."""
    share = -(-n_groups // max(engines, 1))
    return max(1, min(share, sequences_per_engine_cap // samples))


def plan_loop(cfg: LauncherConfig) -> LoopPlan:
    alg, inf = cfg.algorithm, cfg.inference
    in_flight = inf.update_mode is UpdateMode.in_flight
    if cfg.placement.mode is not PlacementMode["async"]:
        return LoopPlan(is_async=False, in_flight_updates=in_flight, chunk_groups=0, chunks_in_flight_per_engine=0,
                        queue_steps=0, queue_groups=0)
    # Half a step per chunk: the trainer sees fresh groups sooner than with whole-step chunks.
    chunk = groups_per_chunk(inf.concurrency_per_engine, alg.samples_per_prompt, max(alg.prompts_per_step // 2, 1),
                             inf.engines)
    queue_steps = max(1, min(QUEUE_STEPS, alg.max_staleness))
    return LoopPlan(is_async=True, in_flight_updates=in_flight, chunk_groups=chunk,
                    chunks_in_flight_per_engine=CHUNKS_IN_FLIGHT_PER_ENGINE, queue_steps=queue_steps,
                    queue_groups=queue_steps * alg.prompts_per_step)
