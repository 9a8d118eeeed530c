"""When actor tasks ran, read from Ray's own task timeline (ray.timeline(): the start and
duration of each actor's __init__ and of each call, recorded by the workers), so a test
can check the order in which groups came up without the launcher reporting anything."""
import sys
import time

import ray

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import a test helper

TIMELINE_WAIT_S = 20.0
"""Workers flush their task events to Ray's GCS about once a second."""


def _worker_id(actor_self) -> str:
    """Runs inside an actor (Ray's __ray_call__): its worker id, as Ray's timeline names it."""
    return f"worker:{ray.get_runtime_context().get_worker_id()}"


def task_spans(actors, suffix: str) -> list[tuple[float, float]]:
    """(start, end) in microseconds of every finished task of `actors` whose name ends with
    `suffix` (".__init__", ".sleep"), once Ray's timeline holds one for each actor."""
    workers = set(ray.get([a.__ray_call__.remote(_worker_id) for a in actors]))
    deadline = time.monotonic() + TIMELINE_WAIT_S
    while True:
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in ray.timeline()
                 if e.get("ph") == "X" and e.get("tid") in workers and e.get("cat", "").endswith(suffix)]
        if len(spans) >= len(actors) or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


def ended_before(first: list[tuple[float, float]], then: list[tuple[float, float]]) -> bool:
    """Every task of `first` had ended before any task of `then` started."""
    return max(end for _, end in first) <= min(start for start, _ in then)
