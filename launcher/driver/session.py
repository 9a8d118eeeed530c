"""A run's actor groups brought up on Ray the one way, for the run, `export` and `eval`:
placed on the plan's slots, started in the order that fits colocated GPUs, and the trainers
loaded from a checkpoint when there is one."""
from contextlib import contextmanager
from pathlib import Path

from launcher.config.schema.choices import PlacementMode
from launcher.driver.cluster import gpu_resource, ray_session
from launcher.driver.groups import EngineGroup, TrainerGroup
from launcher.driver.placement import Placement
from launcher.driver.startup import Startup

PLACEMENT_TIMEOUT_S = 120.0


def place_groups(config, plan, embedded: bool, with_engines: bool = True, startup: Startup | None = None):
    """(trainer group, engine group or None), placed on the plan's slots and started, each
    actor's phase drawn live from `startup`'s board (a run passes its own and finishes it after
    the first sync; without one, start-up ends when this returns).

    Colocated, the engines start first and go to sleep (plan.memory.sleep_level) before any
    trainer rank is created: an awake engine holds its whole gpu_memory_utilization budget,
    which next to a trainer building its weights, grads and optimizer does not fit a GLM-5.3-Flash
    GPU (MEM008 checks the start-up the planner models). The first weight sync then wakes the
    engines' weights. Async groups own disjoint GPUs and start together."""
    from launcher.workers import engine_class, trainer_class

    own = startup is None
    startup = startup or Startup()
    startup.driver_phase("placement")
    where = "the embedded Ray" if embedded else f"the Ray cluster at {config.cluster.ray_address}"
    placement = Placement(plan.placement, config.cluster.gpus_per_node, gpu_resource(embedded), embedded, where)
    placement.ready(PLACEMENT_TIMEOUT_S)

    colocated = config.placement.mode is PlacementMode.colocated
    engines = None
    if with_engines:
        startup.driver_phase("engines" if colocated else "engines and trainers")
        engines = EngineGroup(engine_class(config.inference.backend.value), config, plan, placement, startup.board)
        startup.attach(engines)
    if engines is not None and colocated:
        engines.wait_ready()
        if plan.memory.sleep_level:
            startup.driver_phase("engines to sleep")
            engines.call("sleep", plan.memory.sleep_level)
        startup.driver_phase("trainers")
    trainers = TrainerGroup(trainer_class(config.trainer.backend.value), config, plan, placement, startup.board)
    startup.attach(trainers)
    trainers.start()
    if engines is not None and not colocated:
        engines.wait_ready()
    if own:
        startup.finish()
    return trainers, engines


@contextmanager
def checkpoint_session(config, plan, checkpoint: Path, with_engines: bool):
    """Ray up, the groups placed and the trainers loaded from `checkpoint` (the one the command
    names: no fallback); yields (trainers, engines or None). Ray stops however the block ends."""
    from launcher.driver.checkpoint import restore

    with ray_session(config, plan.env) as embedded:
        trainers, engines = place_groups(config, plan, embedded, with_engines=with_engines)
        restore(trainers, None, checkpoint, fallback=False)
        yield trainers, engines
