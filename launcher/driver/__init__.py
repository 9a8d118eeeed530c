"""The driver process, in three wings that import one way (tests/unit/test_layers.py):
records/ (the run's records on disk) below actors/ (the Ray side) below loop/ (the step loop).
The commands over them sit here: `launch.launch` (a run), `export.export` and
`eval_checkpoint.evaluate_checkpoint`, the last two on a run rebuilt from a checkpoint
(checkpoint_run.py).

The package imports nothing on import, so the CLI (which uses `records.rundir` before a run
starts) never loads Ray for `validate` or `plan`.
"""
