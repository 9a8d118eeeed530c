"""`python -m launcher eval CHECKPOINT_DIR [overrides] [--format json]`: score one checkpoint.

    python -m launcher eval runs/tiny_grpo/checkpoints/step_000150
    python -m launcher eval runs/gsm8k/checkpoints/step_000100 data.val_path=data/gsm8k_test.jsonl

The run is rebuilt from the run directory's overrides.yaml (then the command line's): its
trainer group loads the checkpoint on the run's mesh and pushes the weights to its engines
exactly as a run's first weight sync does; the engines then score the held-out set as a
run's evaluation does (launcher/driver/evaluate.py: same problems, seeds and metrics), so on the
hf engines the numbers equal the `eval/` row the run logged at that step. Prints them (or one
JSON object) and exits 0; 1 when the config is refused, 2 when there is nothing to evaluate,
3 when the evaluation failed.
"""
import json
import sys
import traceback
from pathlib import Path

from launcher.cli.args import UsageError
from launcher.exit_codes import ExitCode, unexpected


class EvalError(RuntimeError):
    """The command cannot run (no such checkpoint, no run config, nothing to evaluate on)."""


def cmd_eval(tokens: list[str], fmt: str) -> int:
    from launcher.contract.errors import CheckpointError
    from launcher.driver.evaluate import EvalConfigError
    from launcher.driver.groups import ActorDiedError
    from launcher.driver.placement import PlacementError

    paths = [t for t in tokens if "=" not in t]
    if len(paths) != 1 or tokens[:1] != paths:
        raise UsageError("eval takes CHECKPOINT_DIR, then overrides: "
                         "python -m launcher eval runs/NAME/checkpoints/step_000100 [data.val_path=...]")
    try:
        return evaluate_checkpoint(Path(paths[0]).resolve(), tokens[1:], fmt)
    except (EvalError, EvalConfigError) as err:
        sys.stderr.write(f"eval: {err}\n")
        return ExitCode.CONFIG
    except (ActorDiedError, CheckpointError, PlacementError) as err:  # expected failures: no traceback
        sys.stderr.write(f"eval failed: {err}\nRay stopped\n")
        return ExitCode.RUN_FAILED
    except Exception:  # noqa: BLE001 - a backend failure: its traceback, after Ray is gone
        traceback.print_exc()
        sys.stderr.write(f"{unexpected('eval')}\n")
        return ExitCode.RUN_FAILED


def _run_overrides(checkpoint: Path) -> list[str]:
    from launcher.driver.export import ExportError, run_overrides

    if not (checkpoint / "COMPLETE").is_file() or not (checkpoint / "trainer").is_dir():
        raise EvalError(f"{checkpoint} is not a complete training checkpoint (a step_N folder with COMPLETE and "
                        "trainer/ in it)")
    try:
        return run_overrides(checkpoint)
    except ExportError as err:
        raise EvalError(str(err)) from err


def evaluate_checkpoint(checkpoint: Path, extra: list[str], fmt: str) -> int:
    from launcher.config.compose import compose
    from launcher.driver.checkpoint import load_driver_state
    from launcher.driver.evaluate import make_evaluator
    from launcher.rl.reward_fn import make_scorer
    from launcher.rl.tokenizer import make_tokenizer
    from launcher.validate import plan_and_check
    from launcher.validate.report import findings_text

    composed = compose(_run_overrides(checkpoint) + extra)
    findings, plan = plan_and_check(composed)
    if any(f.severity == "error" for f in findings):
        sys.stderr.write(findings_text(findings, "refusing to evaluate: "))
        return ExitCode.REFUSED
    cfg = composed.config
    state = load_driver_state(checkpoint)
    tokenizer = make_tokenizer(cfg.model)
    # Before Ray: a missing val set or reward function fails in a second, not after start-up.
    evaluator = make_evaluator(cfg, tokenizer, force=True, log=sys.stderr)
    scorer = make_scorer(cfg.data)
    row = _score_on_ray(cfg, plan, checkpoint, state, evaluator, scorer, tokenizer)
    if fmt == "json":
        sys.stdout.write(json.dumps({"checkpoint": str(checkpoint), "source": evaluator.set.source, **row}) + "\n")
        return ExitCode.OK
    sys.stdout.write(f"eval of {checkpoint} (step {state.step}, policy version {state.policy_version}) on "
                     f"{evaluator.set.source}:\n")
    width = max(len(k) for k in row)
    for key, value in row.items():
        sys.stdout.write(f"  {key:<{width}}  {value:.4f}\n" if isinstance(value, float) else f"  {key:<{width}}  {value}\n")
    return ExitCode.OK


def _score_on_ray(cfg, plan, checkpoint: Path, state, evaluator, scorer, tokenizer) -> dict:
    from launcher.driver.checkpoint import restore
    from launcher.driver.cluster import ray_session
    from launcher.driver.launch import place_groups
    from launcher.weight_sync.push import engines_hold_base, sync_weights

    with ray_session(cfg, plan.env) as embedded:
        trainers, engines = place_groups(cfg, plan, embedded)
        restore(trainers, None, checkpoint, fallback=False)
        sync_weights(trainers, engines, state.policy_version, wait=True,
                     with_base=not engines_hold_base(engines, plan.sync.kind, cfg.model.hf_path))
        if plan.memory.sleep_level:  # colocated: the engines get the GPUs, as in a run's generation phase
            trainers.call("offload")
            engines.call("wake")
        return evaluator.run(engines, state.step, state.policy_version, scorer, tokenizer)
