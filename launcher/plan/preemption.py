"""How long a run needs between a preemption signal and its exit: the default of
run.preemption_grace_s, which the driver spends (launcher/driver/loop/preemption.py), the sbatch
script asks Slurm for (`--signal=B:USR1@<grace>`) and the RayJob manifest gives its pods
(terminationGracePeriodSeconds).

    grace = max(rest of a step, one chunk) + swap + one checkpoint write + STOP_S, up to 10 s

A signal during generation (every round of dynamic sampling included) drops the step: the
engines finish the chunk each is on (one wave of max_response_len decode steps; with partial
rollouts, of the step's token budget), then the trainer takes the GPUs back (the swap). A
signal just as training starts waits for the rest of the step: the log-prob pass, training and
the weight sync. Either comes before the write of
the last completed step and STOP_S for Ray's shutdown. The estimates are plan/timing.py's and
plan/sync.py's: pessimistic constants, so the grace errs long.
"""
import math

from launcher.plan.startup import STARTUP_OVERHEAD_S
from launcher.plan.timing import decode_steps_per_round

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
    hang deadline of a checkpoint call, launcher/driver/actors/deadlines.py, and the grace's write)."""
    return STARTUP_OVERHEAD_S + _node_state_s(plan, gpus_per_node)


def save_s(config, plan) -> float:
    """Of the grace, what the driver keeps for the save and Ray's stop after the step in flight:
    the state at the storage bandwidth (the trainers are up: no start-up overhead) and STOP_S."""
    return _node_state_s(plan, config.cluster.gpus_per_node) + STOP_S


def rest_of_step_s(plan) -> float:
    """A step after its generation: the log-prob pass, training and the weight sync. The driver
    lets the trainers start on a step after a signal only when this much of the budget is left."""
    return plan.timing.logprob_pass_s + plan.timing.train_s + plan.sync.seconds


def grace_s(config, plan) -> tuple[float, str]:
    """(seconds, how they were found) of run.preemption_grace_s: the key's value when set."""
    if config.run.preemption_grace_s is not None:
        return float(config.run.preemption_grace_s), f"run.preemption_grace_s={config.run.preemption_grace_s:g}"
    rest, chunk = rest_of_step_s(plan), decode_steps_per_round(config) * plan.timing.decode_step_s
    write = checkpoint_write_s(plan, config.cluster.gpus_per_node)
    seconds = math.ceil((max(rest, chunk) + plan.timing.swap_s + write + STOP_S) / ROUND_S) * ROUND_S
    return float(seconds), (f"max(the plan's {rest:.0f} s of a step after generation, a {chunk:.0f} s chunk) + "
                            f"{plan.timing.swap_s:.0f} s swap + {write:.0f} s checkpoint write + {STOP_S:.0f} s to "
                            "stop Ray, rounded up (run.preemption_grace_s=null)")
