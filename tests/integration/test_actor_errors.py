"""A dead actor is reported as the cause even when a surviving peer's call fails first:
killing one trainer rank breaks its peers' collectives at once, while Ray takes a moment
to notice the death. Real Ray actors, no launcher run."""
import os
import time

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow


@ray.remote(num_cpus=0)
class Peer:
    def fail_fast(self):
        raise RuntimeError("gloo: connection reset by peer")

    def run_out_of_gpu_memory(self):
        import torch

        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB. GPU 0 has a total capacity "
                                     "of 139.80 GiB of which 1.73 GiB is free. Process 506 has 71.96 GiB memory in use.\n"
                                     "See documentation for Memory Management")

    def die_slowly(self):
        time.sleep(0.5)
        os._exit(1)

    def pid(self):
        return os.getpid()


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


def _group(actors):
    from launcher.driver.actors.actor_group import ActorGroup

    group = ActorGroup()
    group.actors, group.labels = actors, [f"trainer rank {i}" for i in range(len(actors))]
    group.info = [{"node": 0, "gpu": i, "pid": None} for i in range(len(actors))]
    group.wait_ready()
    return group


def test_a_peers_death_is_reported_over_the_survivors_error(local_ray):
    from launcher.driver.actors.errors import ActorDiedError

    survivor, victim = Peer.remote(), Peer.remote()
    group = _group([survivor, victim])
    victim_pid = group.info[1]["pid"]
    with pytest.raises(ActorDiedError, match=rf"trainer rank 1 \(pid {victim_pid}, node 0 GPU 1\) died during step"):
        group._get([survivor.fail_fast.remote(), victim.die_slowly.remote()], "step")


def test_an_error_with_every_peer_alive_is_raised_as_it_is(local_ray):
    first, second = Peer.remote(), Peer.remote()
    group = _group([first, second])
    start = time.monotonic()
    with pytest.raises(ray.exceptions.RayTaskError, match="connection reset"):
        group._get([first.fail_fast.remote(), second.fail_fast.remote()], "step")
    assert time.monotonic() - start < 5.0  # no grace wait when the peers have already answered


def test_a_cuda_out_of_memory_is_a_failed_run_with_torchs_figures_not_a_bug(local_ray):
    """Exit 3 without a traceback (launch.py catches ActorDiedError), and the line keeps torch's
    own figures, which name a process outside the run that holds the memory."""
    from launcher.driver.actors.errors import GpuMemoryError

    engine = Peer.remote()
    group = _group([engine])
    with pytest.raises(GpuMemoryError, match=r"trainer rank 0 .* ran out of GPU memory during first sync: CUDA out "
                                             r"of memory\. .*Process 506 has 71\.96 GiB memory in use\. Compare"):
        group._get([engine.run_out_of_gpu_memory.remote()], "first sync")
