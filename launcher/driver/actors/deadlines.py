"""How long the driver waits for one actor call before it declares the run hung.

A stopped or deadlocked actor (SIGSTOP, a debugger, a collective waiting for a peer that
went away) answers nothing and Ray has nothing to report, so without a deadline the
driver would wait in ray.get forever. Each call's deadline follows the plan's estimate of
its phase (launcher/plan/timing.py and plan.sync), computed here and only here:

    steady state:            max(FLOOR_S, MARGIN x estimate)
    an actor's first call:   max(FIRST_CALL_FLOOR_S, MARGIN x (estimate + start-up estimate))
                             (a start-up call's estimate is the start-up estimate: counted once)

The first call of a method on an actor is where start-up happens (the constructor's model
load behind `pid`, the first step's compilation and autotuning: 191 s on two H200s), so it
gets the start-up estimate on top. The floors keep a tiny CPU run on a loaded 2-core
machine from ever tripping. `run.hang_timeout_s` replaces the steady-state deadline; first
calls still get at least their derived one.

A call whose actor itself waits on other actors (a GPU weight transfer: trainer rank 0 waits
on every engine's transfer steps) is handed the deadline of those inner waits (TRANSFER_STEP)
and gets HANDED_DOWN_GRACE_S on top of its own, so the inner wait ends first and names the
engine that was lost, not the trainer rank that waited on it.
"""
from dataclasses import dataclass

from launcher.plan.preemption import checkpoint_write_s

MARGIN = 3.0
FLOOR_S = 120.0
FIRST_CALL_FLOOR_S = 600.0
HANDED_DOWN_GRACE_S = 30.0
TRANSFER_STEP = "transfer step"
"""One step of a GPU weight transfer on every engine, as trainer rank 0 waits on it."""
HANDS_DOWN = ("connect_weight_transfer", "send_weights")
"""The calls whose actor waits on the engines with the TRANSFER_STEP deadline it is handed."""

_GENERATION_AND_SYNC_CALLS = ("generate", "begin_export", "next_bucket", "release_export", "send_weights",
                              "connect_weight_transfer", "begin_weight_update", "load_weight_bucket",
                              "finish_weight_update", "weight update", TRANSFER_STEP)
PHASE_OF_CALL = {
    "logprobs": "log-prob pass", "train_step": "training",
    **dict.fromkeys(_GENERATION_AND_SYNC_CALLS, "generation + weight sync"),
    **dict.fromkeys(("save_checkpoint", "finalize_checkpoint", "load_checkpoint"), "checkpoint"),
    **dict.fromkeys(("pid", "ray_node", "master_address", "init_distributed"), "start-up"),
}
"""The phase whose estimate bounds a call; any other call (offload, wake, ...) has the floor alone."""


@dataclass(frozen=True)
class Deadline:
    seconds: float
    basis: str
    """How it was derived, for the error: `3 x the plan's 30 s generation estimate, floor 120 s`."""

    def missed(self, whos: list[str], what: str, elapsed_s: float) -> str:
        """The run's error when `whos` have not answered `what` after elapsed_s seconds."""
        return (f"{', '.join(whos)} did not answer {what} within {elapsed_s:.0f} s (deadline: {self.basis}); "
                "a stopped or deadlocked process answers nothing: if this phase is legitimately slower, "
                "raise run.hang_timeout_s")


def phase_estimates_s(plan, gpus_per_node: int) -> dict[str, float]:
    """The plan's estimate of each phase of PHASE_OF_CALL, in seconds (start-up: plan.startup)."""
    t, startup = plan.timing, plan.startup.seconds
    # One estimate for chunks and weight-sync steps: an engine's queue interleaves them (the
    # async loop queues an update behind the chunks being generated, and chunks behind it). A
    # generate call is one round: dynamic sampling's next round is another call.
    return {"generation + weight sync": t.generation_round_s + plan.sync.seconds, "log-prob pass": t.logprob_pass_s,
            "training": t.train_s, "checkpoint": checkpoint_write_s(plan, gpus_per_node), "start-up": startup}


class CallDeadlines:
    """The deadline of every driver wait on an actor call of one run."""

    def __init__(self, estimates_s: dict[str, float] | None = None, hang_timeout_s: float | None = None):
        """estimates_s: phase -> seconds (phase_estimates_s; a missing phase, or none at all, has
        the floors alone); hang_timeout_s: run.hang_timeout_s."""
        self.estimates_s = dict(estimates_s or {})
        self.hang_timeout_s = hang_timeout_s

    @classmethod
    def of_run(cls, config, plan) -> "CallDeadlines":
        return cls(phase_estimates_s(plan, config.cluster.gpus_per_node), config.run.hang_timeout_s)

    def of(self, method: str, first: bool) -> Deadline:
        """The deadline of a call of `method`; `first`: some actor has not answered it yet."""
        phase = PHASE_OF_CALL.get(method)
        estimate = self.estimates_s.get(phase, 0.0)
        derived = self._first_call(phase, estimate) if first else _steady(method, phase, estimate)
        override = self.hang_timeout_s
        if override is not None and not (first and override <= derived.seconds):
            derived = Deadline(override, f"run.hang_timeout_s={override:g}")
        if method in HANDS_DOWN:
            return Deadline(derived.seconds + HANDED_DOWN_GRACE_S,
                            f"{derived.basis}, + {HANDED_DOWN_GRACE_S:.0f} s for the engines' own deadline")
        return derived

    def _first_call(self, phase: str | None, estimate: float) -> Deadline:
        if phase == "start-up":
            return Deadline(max(FIRST_CALL_FLOOR_S, MARGIN * estimate), f"first call: {MARGIN:g} x the plan's "
                            f"{_s(estimate)} s start-up estimate, floor {FIRST_CALL_FLOOR_S:.0f} s")
        startup = self.estimates_s.get("start-up", 0.0)
        return Deadline(max(FIRST_CALL_FLOOR_S, MARGIN * (estimate + startup)),
                        f"first call: {MARGIN:g} x (the plan's {_s(estimate)} s {phase or 'call'} + {_s(startup)} s "
                        f"start-up estimate), floor {FIRST_CALL_FLOOR_S:.0f} s")


def _steady(method: str, phase: str | None, estimate: float) -> Deadline:
    if phase is None or estimate <= 0:
        return Deadline(FLOOR_S, f"floor {FLOOR_S:.0f} s ({method} has no phase estimate)")
    return Deadline(max(FLOOR_S, MARGIN * estimate),
                    f"{MARGIN:g} x the plan's {_s(estimate)} s {phase} estimate, floor {FLOOR_S:.0f} s")


def _s(seconds: float) -> str:
    """Whole seconds, or two significant digits below 10 s (a tiny run's 0.01 s generation)."""
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"
