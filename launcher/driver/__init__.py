"""The driver process: Ray cluster, placement and groups, the sync and async loops, weight-sync
driving, checkpoints, metrics, run directories and export. Entry point: `launch.launch`.

The package imports nothing on import, so `plan` and `validate` (which use `rundir`) never
load Ray.
"""
