"""How long a run needs between a preemption signal and its exit: the default of
run.preemption_grace_s, which the driver spends (launcher/driver/preemption.py), the sbatch
script asks Slurm for (`--signal=B:USR1@<grace>`) and the RayJob manifest gives its pods
(terminationGracePeriodSeconds).

    grace = STEP_MARGIN x one step + one checkpoint write + STOP_S, rounded up to 10 s

One step: generation, the log-prob pass, training, the weight sync and (colocated) the swap,
as plan/timing.py and plan/sync.py estimate them. A signal during generation drops the step
(the engines finish the chunk each is on); one just as training starts waits for the rest of
the step: either is at most a step. STEP_MARGIN is 1: the timing constants are pessimistic
already (dapo_sync: 1867 s a step planned, ~486 s measured on 16 GPUs). One checkpoint write: the
last completed step's, when the newest complete checkpoint is older. STOP_S: Ray's
shutdown and the driver's exit.
"""
import math

from launcher.plan.startup import STARTUP_OVERHEAD_S

STEP_MARGIN = 1.0
"""Times the plan's step estimate (see above)."""
STOP_S = 30.0
"""Ray's shutdown on every node and the driver's exit, after the save."""
ROUND_S = 10


def _node_state_s(plan, gpus_per_node: int) -> float:
    """Seconds one node's training state (trainer weights, optimizer state, adapters) takes at
    the storage bandwidth."""
    tr = plan.memory.trainer
    per_gpu_gib = tr.weights_gib + tr.optimizer_gib + tr.optimizer_host_gib + tr.lora_gib
    return gpus_per_node * per_gpu_gib / plan.startup.storage_gib_per_s


def checkpoint_write_s(plan, gpus_per_node: int) -> float:
    """Seconds to write or read one node's training state, on top of the start-up overhead (the
    hang deadline of a checkpoint call, launcher/driver/deadlines.py, and the grace's write)."""
    return STARTUP_OVERHEAD_S + _node_state_s(plan, gpus_per_node)


def save_s(config, plan) -> float:
    """Of the grace, what the driver keeps for the save and Ray's stop after the step in flight:
    the state at the storage bandwidth (the trainers are up: no start-up overhead) and STOP_S."""
    return _node_state_s(plan, config.cluster.gpus_per_node) + STOP_S


def step_s(plan) -> float:
    """The plan's estimate of one whole step (every phase, one after the other)."""
    t = plan.timing
    return t.generation_s + t.logprob_pass_s + t.train_s + plan.sync.seconds + t.swap_s


def grace_s(config, plan) -> tuple[float, str]:
    """(seconds, how they were found) of run.preemption_grace_s: the key's value when set."""
    if config.run.preemption_grace_s is not None:
        return float(config.run.preemption_grace_s), f"run.preemption_grace_s={config.run.preemption_grace_s:g}"
    step, write = step_s(plan), checkpoint_write_s(plan, config.cluster.gpus_per_node)
    seconds = math.ceil((STEP_MARGIN * step + write + STOP_S) / ROUND_S) * ROUND_S
    return float(seconds), (f"the plan's {step:.0f} s step x {STEP_MARGIN:g} + {write:.0f} s checkpoint write + "
                            f"{STOP_S:.0f} s to stop Ray, rounded up (run.preemption_grace_s=null)")
