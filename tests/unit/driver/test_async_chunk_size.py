"""The async loop's chunk sizes (loop_async._Generator): whole chunks while the queue has room,
and the rest of the room once nothing is in flight, so a one-step queue (max_staleness 1)
holding more than a step minus a chunk is still filled up to a step."""
from types import SimpleNamespace

from launcher.driver.loop_async import _Generator


def _generator(prompts_per_step=16, samples=16) -> _Generator:
    cfg = SimpleNamespace(inference=SimpleNamespace(concurrency_per_engine=128),
                          algorithm=SimpleNamespace(samples_per_prompt=samples, prompts_per_step=prompts_per_step))
    return _Generator(SimpleNamespace(config=cfg, engines=[object()]))


def test_whole_chunks_while_they_fit_and_the_rest_of_the_room_when_nothing_is_in_flight():
    gen = _generator()
    assert gen.per_chunk == 8  # half a step
    assert gen._next_chunk_groups(16) == 8
    gen.pending = {"chunk": SimpleNamespace(members=list(range(8)))}
    assert gen._next_chunk_groups(16) == 8
    assert gen._next_chunk_groups(15) == 0  # a chunk in flight will make progress: wait for it
    gen.pending = {}
    assert gen._next_chunk_groups(7) == 7  # 9 of the step's 16 queued, nothing in flight
    assert gen._next_chunk_groups(0) == 0
