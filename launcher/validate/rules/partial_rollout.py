"""`algorithm.partial_rollout` (launcher/driver/partial.py): a step's token budget per
sequence, unfinished sequences carried to the next step; refused before Ray where it would
do nothing or be wrong."""
import math

from launcher.config.schema.choices import PlacementMode
from launcher.validate.registry import error, rule

KEY = "algorithm.partial_rollout.max_tokens_per_step"
RECORDERS = ("routing_replay", "routing_agreement", "indexer_replay", "indexer_agreement")


def _budget(cfg) -> int:
    return cfg.algorithm.partial_rollout.max_tokens_per_step


def steps_to_finish(cfg) -> int:
    """Steps a response of max_response_len tokens takes under the budget."""
    return math.ceil(cfg.algorithm.max_response_len / _budget(cfg))


@rule("PART001")
def budget_below_max_response_len(cfg, plan):
    """A budget of max_response_len or more cuts no sequence: nothing would ever be carried."""
    b, m = _budget(cfg), cfg.algorithm.max_response_len
    if b >= m:
        yield error(KEY, f"{KEY}={b} with algorithm.max_response_len={m}",
                    "Every response ends within one step's budget, so no sequence is ever carried and the setting "
                    "does nothing but make you think it does.",
                    f"Set {KEY} below {m} (e.g. a quarter of it, {max(m // 4, 1)}), or {KEY}=0 for off.")


@rule("PART002")
def sync_loop_only(cfg, plan):
    """The async loop never waits for a step's longest sequence: its engines keep generating."""
    if _budget(cfg) and cfg.placement.mode is PlacementMode["async"]:
        yield error(KEY, f"{KEY}={_budget(cfg)} with placement.mode=async",
                    "Partial rollouts cut the colocated loop's generation so a step need not wait for its longest "
                    "sequence. The async loop has no such wait: its engines generate continuously, and with "
                    "inference.update_mode=in_flight a weight update lands at a token boundary of the chunk in "
                    "flight instead of waiting for it.",
                    f"Set {KEY}=0 with placement.mode async (use inference.update_mode=in_flight there), or run "
                    "placement.mode colocated.")


@rule("PART003")
def no_route_recorders(cfg, plan):
    """A carried sequence is sent again as a prompt: the engine would return the new weights'
    routes and indexer pools for its earlier tokens, not the ones they were sampled with."""
    on = [k for k in RECORDERS if getattr(cfg.algorithm, k)]
    if _budget(cfg) and on:
        yield error(KEY, f"{KEY}={_budget(cfg)} with algorithm.{on[0]}=true",
                    "A carried sequence is continued by sending its tokens so far as the prompt, so the engine "
                    "reports the new weights' prefill routes and indexer pools for them; replay needs the ones "
                    "recorded when each token was sampled, which the carried state does not keep.",
                    f"Set {KEY}=0, or algorithm.{on[0]}=false.")


@rule("PART004")
def staleness_covers_the_longest(cfg, plan):
    """A max_response_len response takes ceil(max_response_len / budget) steps, so its first
    token is that many versions minus one old when its group trains."""
    if not _budget(cfg) or _budget(cfg) >= cfg.algorithm.max_response_len:
        return
    need = steps_to_finish(cfg) - 1
    if cfg.algorithm.max_staleness < need:
        yield error("algorithm.max_staleness",
                    f"algorithm.max_staleness={cfg.algorithm.max_staleness} with {KEY}={_budget(cfg)} and "
                    f"algorithm.max_response_len={cfg.algorithm.max_response_len}",
                    f"A response of max_response_len tokens is generated over {steps_to_finish(cfg)} steps, so its "
                    f"first token is {need} policy version(s) old when its group trains (the sync loop never "
                    "drops it: each step continues every carried sequence, so no token gets older than that). "
                    "max_staleness is the age the run accepts; holding a lower one would mean dropping exactly "
                    "the longest responses' groups, biasing training towards short ones.",
                    f"Set algorithm.max_staleness >= {need}, or raise {KEY}.")
