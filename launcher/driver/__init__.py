"""The driver process: Ray cluster, placement and groups, the sync and async loops, weight-sync
driving, checkpoints, metrics, run directories and export. Entry point: `launch.launch`.

The package imports nothing on import, so the CLI (which uses `rundir` before a run starts)
never loads Ray for `validate` or `plan`.
"""
