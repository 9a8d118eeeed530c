"""trainer.nccl_timeout_s is the timeout of every live process group of the trainer ranks:
two trainer actors started the way a run starts them (embedded Ray, placement,
TrainerGroup.start -> init_distributed on gloo), their groups read inside the actors."""
import importlib.util
import sys

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import a test module
TIMEOUT_S = 1234
"""Neither torch's default (30 min), Megatron's (30 min) nor the schema's (600 s)."""
HAS_MEGATRON = importlib.util.find_spec("megatron") is not None


def _seconds(group) -> float:
    """A group's timeout: torch keeps it only in its backend's options (gloo: the CPU one)."""
    import torch

    return group._get_backend(torch.device("cpu")).options._timeout.total_seconds()


def _live_timeouts(trainer) -> dict[str, float]:
    """Runs inside a trainer actor (Ray's __ray_call__): the timeout of each group it holds."""
    import torch.distributed as dist

    out = {"world": _seconds(dist.group.WORLD)}
    if type(trainer).__name__ == "MegatronTrainer":
        from megatron.core import parallel_state as ps

        out.update(tp=_seconds(ps.get_tensor_model_parallel_group()), ep=_seconds(ps.get_expert_model_parallel_group()),
                   etp=_seconds(ps.get_expert_tensor_parallel_group()), dp=_seconds(ps.get_data_parallel_group()),
                   edp=_seconds(ps.get_expert_data_parallel_group()),
                   dp_gloo=_seconds(ps.get_data_parallel_group_gloo()))
    return out


def _started_trainers(config, plan):
    from launcher.driver.actors.cluster import gpu_resource
    from launcher.driver.actors.placement import Placement
    from launcher.driver.actors.trainer_group import TrainerGroup
    from launcher.workers import trainer_class

    placement = Placement(plan.placement, config.cluster.gpus_per_node, gpu_resource(True), True)
    placement.ready(120)
    trainers = TrainerGroup(trainer_class(config.trainer.backend.value), config, plan, placement)
    trainers.start()
    return trainers


@pytest.mark.parametrize("backend", [
    "hf", pytest.param("megatron", marks=pytest.mark.skipif(not HAS_MEGATRON, reason="megatron-core not installed"))])
def test_every_trainer_group_has_the_configured_timeout(backend):
    from launcher.config.compose import compose
    from launcher.driver.actors.cluster import ray_session
    from launcher.plan import make_plan

    config = compose(["recipe=tiny_grpo", f"trainer.backend={backend}", f"trainer.nccl_timeout_s={TIMEOUT_S}",
                      f"run.name=nccl-timeout-{backend}"]).config
    plan = make_plan(config)
    assert plan.mesh.world == 2
    with ray_session(config, plan.env):
        trainers = _started_trainers(config, plan)
        per_rank = ray.get([actor.__ray_call__.remote(_live_timeouts) for actor in trainers.actors])
    expected_groups = {"world"} | ({"tp", "ep", "etp", "dp", "edp", "dp_gloo"} if backend == "megatron" else set())
    for rank, timeouts in enumerate(per_rank):
        assert set(timeouts) == expected_groups
        assert timeouts == dict.fromkeys(expected_groups, float(TIMEOUT_S)), f"trainer rank {rank}: {timeouts}"
