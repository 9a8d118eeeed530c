"""`export CHECKPOINT_DIR OUT_DIR [--adapter] [overrides]`: paths first, then Hydra overrides."""
import sys
import traceback

from launcher.cli.args import UsageError
from launcher.exit_codes import ExitCode, unexpected


def cmd_export(tokens: list[str], adapter: bool) -> int:
    from launcher.contract.errors import CheckpointError
    from launcher.driver.actors.errors import ActorDiedError
    from launcher.driver.actors.placement import PlacementError
    from launcher.driver.checkpoint_run import CheckpointRunError
    from launcher.driver.export import export

    paths = [t for t in tokens if "=" not in t]
    if len(paths) != 2 or tokens[:2] != paths:
        raise UsageError("export takes CHECKPOINT_DIR OUT_DIR, then overrides: "
                         "python -m launcher export runs/NAME/checkpoints/step_000100 out/NAME [--adapter]")
    try:
        return export(paths[0], paths[1], adapter, tokens[2:])
    except CheckpointRunError as err:
        sys.stderr.write(f"export: {err}\n")
        return ExitCode.CONFIG
    except (ActorDiedError, CheckpointError, PlacementError) as err:  # expected failures: no traceback
        sys.stderr.write(f"export failed: {err}\nRay stopped; nothing was written\n")
        return ExitCode.RUN_FAILED
    except Exception:  # noqa: BLE001 - a backend failure: its traceback, after Ray and the partial folder are gone
        traceback.print_exc()
        sys.stderr.write(f"{unexpected('export')}. Nothing was written\n")
        return ExitCode.RUN_FAILED
