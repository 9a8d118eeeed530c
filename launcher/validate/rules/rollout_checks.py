"""run.rollout_checks (launcher/driver/loop/rollout_health.py): bounds that can hold."""
from launcher.config.schema.rollout_checks import RolloutChecksConfig
from launcher.validate.registry import error, rule


@rule("CHECK001")
def stop_window_fits_the_run(cfg, plan):
    """rollout_checks.stop_after_steps is within 1..run.steps: a longer window could never stop the run.
    The default window is exempt: a one-step smoke run (run.steps=1) is refused for no key it set."""
    checks, steps = cfg.run.rollout_checks, cfg.run.steps
    default = RolloutChecksConfig.stop_after_steps
    if not 1 <= checks.stop_after_steps <= max(steps, 1) and checks.stop_after_steps != default:
        yield error("run.rollout_checks.stop_after_steps",
                    f"run.rollout_checks.stop_after_steps={checks.stop_after_steps}, run.steps={steps}",
                    "It counts steps in a row past a stop bound; outside 1..run.steps no run could ever stop on it.",
                    f"Set it between 1 and {max(steps, 1)} (default 2), or set the metric's stop bound to null "
                    "to never stop on it.")
