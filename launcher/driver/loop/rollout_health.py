"""Bounds on each step's degeneration and trainer-vs-engine mismatch metrics
(run.rollout_checks): past `warn` the console says so once per metric; past `stop` for
stop_after_steps steps in a row the run stops (exit 3) with the numbers and what to check.

The sync loop checks the samples' signs (GENERATION_KEYS) after generation, before it trains
on them, and the mismatch (TRAINING_KEYS) once the step's training measured it; the async
loop checks both at the end of each step. The counts live in the driver state, counted before
the step's checkpoint is taken, so a resume counts on from it; a stop on them is raised after
the step's row is logged.
"""
import sys

from launcher.driver.loop.canary import RolloutCheckError

GENERATION_KEYS = ("repeat_ngram_frac", "collapse_frac", "truncated_frac", "nonfinite_logprobs")
TRAINING_KEYS = ("logprob_abs_diff_mean", "rollout_kl")
WHAT_TO_CHECK = {
    "repeat_ngram_frac": "responses loop: the sampling settings (algorithm.temperature, top_p), the engine's long-decode "
                         "kernels and its KV/recurrent state handling",
    "collapse_frac": "responses end in one id repeated: the engine's state after a wake (inference.sleep_level), "
                     "non-finite logits, weights that did not reach the engine",
    "truncated_frac": "responses run to algorithm.max_response_len: loops (repeat_ngram_frac), an EOS id missing from "
                      "the tokenizer or generation config",
    "nonfinite_logprobs": "the engine returned NaN or infinite log-probs: a kernel that overflowed (a linear-attention "
                          "inverse in fp16), NaN in the synced weights",
    "logprob_abs_diff_mean": "engine and trainer disagree on the same tokens: weights synced under wrong names, dtypes "
                             "or shards, routing (algorithm.routing_replay), kernels",
    "rollout_kl": "as logprob_abs_diff_mean; in an async run also the samples' staleness (algorithm.max_staleness)",
}


class HealthWatch:
    def __init__(self, cfg, rt):
        self.cfg, self.rt = cfg, rt
        self.warned: set[str] = set()
        self.pending: RolloutCheckError | None = None

    def check(self, step: int, values: dict, keys: tuple[str, ...], defer: bool = False) -> None:
        """Warn once per metric past its `warn`; RolloutCheckError naming every metric at its
        stop_after_steps-th step in a row past `stop`. A missing or null value (no sample, no
        training) leaves the count. `defer`: count now (before the step's checkpoint takes the
        counts) and raise at raise_pending() (after the step's row is logged)."""
        in_a_row, tripped = self.rt.state.checks_in_a_row, []
        for key in keys:
            value, bound = values.get(key), getattr(self.cfg, key)
            if value is None:
                continue
            if bound.warn is not None and value > bound.warn and key not in self.warned:
                self.warned.add(key)
                _say(f"warning: step {step}: {key} {value:.4g} > run.rollout_checks.{key}.warn={bound.warn} "
                     f"(said once): {WHAT_TO_CHECK[key]}")
            in_a_row[key] = in_a_row.get(key, 0) + 1 if bound.stop is not None and value > bound.stop else 0
            if in_a_row[key] >= self.cfg.stop_after_steps:
                tripped.append(f"{key} {value:.4g} > run.rollout_checks.{key}.stop={bound.stop} for {in_a_row[key]} "
                               f"steps in a row (check: {WHAT_TO_CHECK[key]})")
        if tripped:
            done = "the step's samples were not trained on" if set(keys) <= set(GENERATION_KEYS) else \
                "stopped after its update"
            self.pending = RolloutCheckError(f"step {step}: " + "; ".join(tripped) +
                                             f" (stop_after_steps={self.cfg.stop_after_steps}); {done}")
        if not defer:
            self.raise_pending()

    def raise_pending(self) -> None:
        if self.pending is not None:
            error, self.pending = self.pending, None
            raise error


def _say(message: str) -> None:
    sys.stdout.write(message + "\n")
    sys.stdout.flush()
