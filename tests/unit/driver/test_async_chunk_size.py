"""The async loop's chunk sizes (loop_async._Generator): whole chunks while the queue has room,
and the rest of the room once nothing is in flight, so a one-step queue (max_staleness 1)
holding more than a step minus a chunk is still filled up to a step."""
from types import SimpleNamespace

from launcher.driver.loop.loop_async import _Generator
from launcher.plan import make_plan
from tests.shared_compose import compose_shipped


def _generator(*overrides: str) -> _Generator:
    cfg = compose_shipped(["recipe=tiny_dapo_async", *overrides]).config
    return _Generator(SimpleNamespace(config=cfg, plan=make_plan(cfg), engines=[object()]))


def test_whole_chunks_while_they_fit_and_the_rest_of_the_room_when_nothing_is_in_flight():
    gen = _generator("algorithm.prompts_per_step=16", "algorithm.samples_per_prompt=16",
                     "inference.concurrency_per_engine=128", "inference.engines=1")
    assert gen.per_chunk == 8  # half a step: the plan's chunk
    assert gen._next_chunk_groups(16) == 8
    gen.pending = {"chunk": SimpleNamespace(members=list(range(8)))}
    assert gen._next_chunk_groups(16) == 8
    assert gen._next_chunk_groups(15) == 0  # a chunk in flight will make progress: wait for it
    gen.pending = {}
    assert gen._next_chunk_groups(7) == 7  # 9 of the step's 16 queued, nothing in flight
    assert gen._next_chunk_groups(0) == 0
