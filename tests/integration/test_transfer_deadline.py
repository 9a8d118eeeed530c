"""The GPU weight transfer's own waits have a deadline: trainer rank 0 waits on every engine's
transfer step (weight_sync/transports/vllm_engine.py EngineGroupClient) within the bound the driver hands it, and
a stopped or killed engine ends the driver's call naming that engine, not the trainer rank.

Real Ray actors standing in for the engines and the trainer (the transfer itself needs GPUs
and vLLM; tests/gpu/test_vllm_gpu.py runs it)."""
import os
import time

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

from launcher.contract.errors import PeerLostError  # noqa: E402 - after the importorskip
from launcher.weight_sync.messages import EngineWait  # noqa: E402
from launcher.weight_sync.transports.vllm_engine import EngineGroupClient  # noqa: E402


@ray.remote(num_cpus=0)
class Engine:
    """An engine's transfer steps; `nap_s`: how long each takes (a stopped engine: forever)."""

    def __init__(self, nap_s: float = 0.0):
        self.nap_s = nap_s

    def pid(self) -> int:
        return os.getpid()

    def transfer_start(self) -> None:
        time.sleep(self.nap_s)


@ray.remote(num_cpus=0)
class Trainer:
    """Trainer rank 0's side of send_weights: the transfer client over the engines."""

    def __init__(self, engines: list):
        self.engines = engines

    def pid(self) -> int:
        return os.getpid()

    def send_weights(self, version: int, wait: EngineWait) -> None:
        EngineGroupClient(self.engines, wait).start_weight_update()


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


WHOS = ["engine 0 (pid 11, node 1 GPU 0)", "engine 1 (pid 12, node 1 GPU 1)"]


def test_a_stopped_engine_is_named_within_the_deadline(local_ray):
    engines = [Engine.remote(), Engine.remote(600.0)]
    client = EngineGroupClient(engines, EngineWait(WHOS, 1.0, "3 x the plan's 0.2 s estimate"))
    started = time.monotonic()
    with pytest.raises(PeerLostError, match=r"^engine 1 \(pid 12, node 1 GPU 1\) did not answer transfer_start within "
                                            r"1 s \(deadline: 3 x the plan's 0.2 s estimate\)$"):
        client.start_weight_update()
    assert time.monotonic() - started < 5


def _kill(actor, within_s: float = 30.0) -> None:
    """ray.kill returns before the actor is gone: a call made right after it can still run (the
    CI run of 2026-12-04 saw transfer_start answer from a killed engine), so wait until calls fail."""
    ray.kill(actor)
    stop = time.monotonic() + within_s
    while time.monotonic() < stop:
        try:
            ray.get(actor.pid.remote())
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the killed actor still answers after {within_s:.0f} s")


def test_a_killed_engine_is_named_with_the_step(local_ray):
    engines = [Engine.remote(), Engine.remote()]
    ray.get([e.pid.remote() for e in engines])
    _kill(engines[0])
    with pytest.raises(PeerLostError, match=r"^engine 0 \(pid 11, node 1 GPU 0\) died during transfer_start: "):
        EngineGroupClient(engines, EngineWait(WHOS, 60.0, "test")).start_weight_update()


def test_the_driver_names_the_engine_its_trainer_waited_on(local_ray):
    """The driver's send_weights call ends with ActorDiedError naming trainer rank 0, the call
    and the stopped engine; its own deadline (longer by the grace) never ran out."""
    from launcher.driver.actors.actor_group import ActorGroup
    from launcher.driver.actors.deadlines import CallDeadlines
    from launcher.driver.actors.errors import ActorDiedError

    engines = [Engine.remote(), Engine.remote(600.0)]
    group = ActorGroup(CallDeadlines(hang_timeout_s=1.0))
    group.actors, group.labels = [Trainer.remote(engines)], ["trainer rank 0"]
    group.info = [{"node": 0, "gpu": 0, "pid": None}]
    group.wait_ready()
    pid = group.info[0]["pid"]
    started = time.monotonic()
    with pytest.raises(ActorDiedError, match=rf"^trainer rank 0 \(pid {pid}, node 0 GPU 0\), during send_weights: "
                                             r"engine 1 \(pid 12, node 1 GPU 1\) did not answer transfer_start within 1 s"):
        group.call("send_weights", 1, EngineWait(WHOS, 1.0, "run.hang_timeout_s=1"))
    assert time.monotonic() - started < 10
