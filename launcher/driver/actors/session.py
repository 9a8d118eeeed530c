"""A run's actor groups brought up on Ray the one way, for the run, `export` and `eval`:
placed on the plan's slots, started in the order that fits colocated GPUs, and the trainers
loaded from a checkpoint when there is one."""
from contextlib import contextmanager
from pathlib import Path

from launcher.config.schema.choices import PlacementMode
from launcher.contract.errors import CheckpointMismatchError
from launcher.driver.actors.cluster import gpu_resource, ray_session
from launcher.driver.actors.engine_group import EngineGroup
from launcher.driver.actors.errors import ActorDiedError
from launcher.driver.actors.placement import Placement
from launcher.driver.actors.startup import Startup
from launcher.driver.actors.trainer_group import TrainerGroup
from launcher.driver.records.checkpoint import Checkpointer, ResumeError, error_reason, warn

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
    with ray_session(config, plan.env) as embedded:
        trainers, engines = place_groups(config, plan, embedded, with_engines=with_engines)
        restore(trainers, None, checkpoint, fallback=False)
        yield trainers, engines


def restore(trainers, ckpt: Checkpointer, first: Path, fallback: bool) -> Path:
    """Load checkpoint `first` into every trainer rank; returns the checkpoint loaded.

    When a rank's load_checkpoint raises, `fallback` (run.resume=auto) moves on to the
    newest usable checkpoint before it, saying so; without it the run fails naming why. A
    rank that died is no damage of the checkpoint: its ActorDiedError goes up unchanged."""
    path = Path(first)
    while True:
        try:
            notes = {n for n in trainers.call("load_checkpoint", str(path / "trainer")) if n}
            for note in sorted(notes):  # e.g. the mesh changed: what was resharded
                warn(f"{path.name}: {note}")
            return path
        except ActorDiedError:
            raise
        except Exception as err:  # noqa: BLE001 - whatever a backend's load raises makes the checkpoint unusable
            reason = error_reason(err)
            if isinstance(getattr(err, "cause", None) or err, CheckpointMismatchError):
                raise ResumeError(f"checkpoint {path} belongs to another run: {reason}") from err
            if not fallback:
                raise ResumeError(f"checkpoint {path} could not be loaded: {reason}") from err
            warn(f"skipping {path}: a trainer rank could not load it ({reason})")
            previous = ckpt.newest_usable(before=path)
            if previous is None:
                raise ResumeError(f"run.resume=auto: no checkpoint in {ckpt.root} loads (the last tried, "
                                  f"{path.name}: {reason}); move them away to start afresh") from err
            warn(f"resuming from {previous} instead")
            path = previous

