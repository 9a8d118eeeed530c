"""DAPO dynamic sampling that finds nothing to learn: said at once, and a run that keeps
finding nothing is ended (algorithm.dynamic_sampling.max_empty_steps).

A group whose samples all got the same task reward has zero advantage: dynamic sampling
drops it and generates again, at most max_regenerations more rounds. When the rounds run
out the step trains on the groups it kept (fewer than asked), and on none it trains nothing:
no update, the engines keep their weights. A random-init policy on a real task scores 0
everywhere, so every step then burns 1 + max_regenerations generation rounds and teaches
nothing; the H200 slice spent 17 minutes so, silently. Here each short step is one console
line (kept of asked, rounds) besides groups_kept / groups_asked / rounds in metrics.jsonl,
and max_empty_steps such steps in a row end the run (exit 3) with the pass rate of their
samples and what to change. The async loop has no step that trains nothing (it waits for
groups it can keep); it ends once the groups of max_empty_steps steps with their rounds
(max_empty_steps x prompts_per_step x (1 + max_regenerations)) arrived in a row without one
to keep.
"""
import sys


class NoSignalError(RuntimeError):
    """Dynamic sampling kept no group for algorithm.dynamic_sampling.max_empty_steps steps in a row."""


class NoSignalWatch:
    def __init__(self, alg):
        ds = alg.dynamic_sampling
        self.limit, self.samples, self.asked = ds.max_empty_steps, alg.samples_per_prompt, alg.prompts_per_step
        self.rounds = 1 + ds.max_regenerations
        self.empty_steps = 0
        self.groups_in_a_row: list = []
        """Every group generated since the last one kept (their pass rate goes into the error)."""

    def sync_step(self, step: int, kept: int, rounds: int, seen: list, carried: int = 0) -> None:
        """After step `step`'s row is logged (sync loop): its line when it kept fewer groups than
        asked; NoSignalError when it is the limit's step in a row to keep none. `carried`: groups
        left unfinished for the next step (partial rollouts): they fill the step's share without
        being dropped, and a step that finished no group says nothing about the reward."""
        if not seen:  # every group carried on: none finished to keep or drop
            return
        if kept + carried >= self.asked:
            self._reset()
            return
        passed = sum(sum(g.correct) for g in seen) / max(len(seen) * self.samples, 1)
        finished = f"{self.asked - carried} finished groups ({carried} carried to the next step)" if carried \
            else f"{self.asked} groups"
        _say(f"step {step}: dynamic sampling kept {kept} of {finished} after {rounds} round(s) of "
             f"generation ({len(seen)} groups, {passed:.1%} of samples passed): "
             + (f"trained on {kept}" if kept else "trained on none (no update)"))
        if kept:
            self._reset()
            return
        self.empty_steps += 1
        self.groups_in_a_row += seen
        if self.limit and self.empty_steps >= self.limit:
            raise NoSignalError(self._message(f"{self.empty_steps} steps in a row (up to step {step})"))

    def async_groups(self, seen: list, kept: list) -> None:
        """Groups the async loop received, and those of them it kept: NoSignalError once the
        groups of `limit` steps with all their rounds arrived in a row without one kept."""
        if kept:
            self._reset()
            return
        self.groups_in_a_row += seen
        limit_groups = self.limit * self.asked * self.rounds
        if self.limit and len(self.groups_in_a_row) >= limit_groups:
            raise NoSignalError(self._message(f"{len(self.groups_in_a_row)} groups in a row (the groups of "
                                              f"{self.limit} steps with their {self.rounds} round(s) each)"))

    def _reset(self) -> None:
        self.empty_steps, self.groups_in_a_row = 0, []

    def _message(self, span: str) -> str:
        groups = self.groups_in_a_row
        n = max(len(groups) * self.samples, 1)
        passed = sum(sum(g.correct) for g in groups) / n
        mean = sum(sum(g.task_rewards) for g in groups) / n
        if passed == 0.0:
            fix = ("the policy solves none of these problems: start from a trained checkpoint (model.hf_path), "
                   "use easier data or a longer algorithm.max_response_len, or raise algorithm.samples_per_prompt "
                   "so that a group holds a success more often")
        elif passed == 1.0:
            fix = "the policy solves every problem: train on harder data"
        else:
            fix = ("raise algorithm.samples_per_prompt or algorithm.dynamic_sampling.max_regenerations so that "
                   "a group's samples differ more often")
        return (f"dynamic sampling kept no group for {span}: every group's {self.samples} samples got the same task "
                f"reward, so there was nothing to learn. The reward's pass rate over those {len(groups)} groups: "
                f"{passed:.1%} of {n} samples (mean task reward {mean:.3f}). Fix: {fix}; "
                f"algorithm.dynamic_sampling.max_empty_steps={self.limit} ends the run after that many (0: never)")


def _say(message: str) -> None:
    sys.stdout.write(message + "\n")
    sys.stdout.flush()
