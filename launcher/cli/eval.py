"""`python -m launcher eval CHECKPOINT_DIR [overrides] [--format json]`: score one checkpoint.

    python -m launcher eval runs/tiny_grpo/checkpoints/step_000150
    python -m launcher eval runs/gsm8k/checkpoints/step_000100 data.val_path=data/gsm8k_test.jsonl

The run is rebuilt from the run directory's overrides.yaml (then the command line's) and
scored by launcher/driver/eval_checkpoint.py; this module parses and prints. Prints the
metrics (or one JSON object) and exits 0; 1 when the config is refused, 2 when there is
nothing to evaluate, 3 when the evaluation failed.
"""
import json
import sys
import traceback
from pathlib import Path

from launcher.cli.args import UsageError
from launcher.exit_codes import ExitCode, unexpected


def cmd_eval(tokens: list[str], fmt: str) -> int:
    from launcher.contract.errors import CheckpointError
    from launcher.driver.actors.errors import ActorDiedError
    from launcher.driver.actors.placement import PlacementError
    from launcher.driver.checkpoint_run import CheckpointRunError
    from launcher.driver.loop.evaluate import EvalConfigError

    paths = [t for t in tokens if "=" not in t]
    if len(paths) != 1 or tokens[:1] != paths:
        raise UsageError("eval takes CHECKPOINT_DIR, then overrides: "
                         "python -m launcher eval runs/NAME/checkpoints/step_000100 [data.val_path=...]")
    try:
        return _print_eval(Path(paths[0]).resolve(), tokens[1:], fmt)
    except (CheckpointRunError, EvalConfigError) as err:
        sys.stderr.write(f"eval: {err}\n")
        return ExitCode.CONFIG
    except (ActorDiedError, CheckpointError, PlacementError) as err:  # expected failures: no traceback
        sys.stderr.write(f"eval failed: {err}\nRay stopped\n")
        return ExitCode.RUN_FAILED
    except Exception:  # noqa: BLE001 - a backend failure: its traceback, after Ray is gone
        traceback.print_exc()
        sys.stderr.write(f"{unexpected('eval')}\n")
        return ExitCode.RUN_FAILED


def _print_eval(checkpoint: Path, extra: list[str], fmt: str) -> int:
    from launcher.driver.eval_checkpoint import evaluate_checkpoint

    done = evaluate_checkpoint(checkpoint, extra)
    if done is None:
        return ExitCode.REFUSED
    if fmt == "json":
        sys.stdout.write(json.dumps({"checkpoint": str(checkpoint), "source": done.source, **done.row}) + "\n")
        return ExitCode.OK
    sys.stdout.write(f"eval of {checkpoint} (step {done.step}, policy version {done.policy_version}) on "
                     f"{done.source}:\n")
    width = max(len(k) for k in done.row)
    for key, value in done.row.items():
        sys.stdout.write(f"  {key:<{width}}  {value:.4f}\n" if isinstance(value, float) else f"  {key:<{width}}  {value}\n")
    return ExitCode.OK
