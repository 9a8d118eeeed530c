"""`eval`'s work: one checkpoint of a run scored on the held-out set as the run's own evaluation
scores it (driver/loop/evaluate.py: same problems, seeds and metrics), so on the hf engines the
numbers equal the `eval/` row the run logged at that step. The trainers load the checkpoint on
the run's mesh and push the weights to the engines exactly as a run's first weight sync does."""
import sys
from dataclasses import dataclass
from pathlib import Path

from launcher.driver.checkpoint_run import rebuild_run


@dataclass
class CheckpointEval:
    step: int
    policy_version: int
    source: str
    """The held-out set scored (its path, or the train file's held-out share)."""
    row: dict
    """The metrics, as the run's `eval/` row names them."""


def evaluate_checkpoint(checkpoint: Path, extra: list[str]) -> CheckpointEval | None:
    """The checkpoint's scores; None when the rules refuse the rebuilt run (findings on stderr).
    The val set and reward function load before Ray starts, so a mistake there costs a second."""
    from launcher.driver.loop.episodes import episode_runner
    from launcher.driver.loop.evaluate import make_evaluator
    from launcher.driver.records.checkpoint import load_driver_state
    from launcher.rl.reward_fn import make_scorer
    from launcher.rl.tokenizer import make_tokenizer

    rebuilt = rebuild_run(checkpoint, extra, "evaluate")
    if rebuilt is None:
        return None
    composed, plan = rebuilt
    cfg = composed.config
    state = load_driver_state(checkpoint)
    tokenizer = make_tokenizer(cfg.model)
    evaluator = make_evaluator(cfg, tokenizer, force=True, log=sys.stderr, episodes=episode_runner(cfg, tokenizer))
    scorer = make_scorer(cfg.data)
    row = _score_on_ray(cfg, plan, checkpoint, state, evaluator, scorer, tokenizer)
    return CheckpointEval(state.step, state.policy_version, evaluator.set.source, row)


def _score_on_ray(cfg, plan, checkpoint: Path, state, evaluator, scorer, tokenizer) -> dict:
    from launcher.driver.actors.session import checkpoint_session
    from launcher.weight_sync.push import engines_hold_base, sync_weights

    with checkpoint_session(cfg, plan, checkpoint, with_engines=True) as (trainers, engines):
        sync_weights(trainers, engines, state.policy_version, wait=True,
                     with_base=not engines_hold_base(engines, plan.sync.kind, cfg.model.hf_path))
        if plan.memory.sleep_level:  # colocated: the engines get the GPUs, as in a run's generation phase
            trainers.call("offload")
            engines.call("wake")
        return evaluator.run(engines, state.step, state.policy_version, scorer, tokenizer)
