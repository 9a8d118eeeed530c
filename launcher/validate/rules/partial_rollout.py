"""`algorithm.partial_rollout` (launcher/driver/loop/partial.py): a step's token budget per
sequence, unfinished sequences carried to the next step; refused before Ray where it would
do nothing or be wrong."""
from launcher.config.schema.choices import PlacementMode
from launcher.validate.registry import error, rule

KEY = "algorithm.partial_rollout.max_tokens_per_step"
RECORDERS = ("routing_replay", "routing_agreement", "indexer_replay", "indexer_agreement")


def _budget(cfg) -> int:
    return cfg.algorithm.partial_rollout.max_tokens_per_step


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
