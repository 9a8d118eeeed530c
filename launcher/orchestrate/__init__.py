"""Run a planned config on Ray: `launch(composed, plan, run_dir) -> exit code`.

Starts (or joins) Ray, places the trainer and inference groups from the plan, restores a
checkpoint when asked, runs the loop for the placement mode, and tears everything down on
success, error or Ctrl-C/SIGTERM.
"""
from launcher.orchestrate.launch import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, launch

__all__ = ["EXIT_INTERRUPTED", "EXIT_OK", "EXIT_RUN_FAILED", "launch"]
