"""Data rules: the task is registered, its files exist and have a readable format."""
from launcher._paths import resolve_data_path
from launcher.validate.registry import error, rule

FORMATS = (".jsonl", ".parquet")


def _tasks():
    from launcher.rl.tasks import TASKS  # pure Python: reward parsers and synthetic generators

    return TASKS


@rule("DATA001")
def task_registered(cfg, plan):
    """data.task names a registered task."""
    names = _tasks().names()
    if cfg.data.task not in names:
        yield error("DATA001", "data.task", f"data.task={cfg.data.task!r} is not a registered task",
                    "The task selects the reward function (and the generator for synthetic tasks).",
                    f"Use one of {names}.")


@rule("DATA002")
def files_exist(cfg, plan):
    """Train/val files exist as jsonl or parquet; file-less tasks are synthetic."""
    d, tasks = cfg.data, _tasks()
    task = tasks.get(d.task) if d.task in tasks.names() else None
    if task is not None and task.generate is None and d.train_path is None:
        yield error("DATA002", "data.train_path", f"data.train_path=null for task {d.task!r}",
                    f"{d.task} reads prompts from a file; only synthetic tasks generate their own.",
                    "Set data.train_path to a jsonl or parquet file.")
    for key, path in (("data.train_path", d.train_path), ("data.val_path", d.val_path)):
        if path is None:
            continue
        resolved = resolve_data_path(path)
        if resolved.suffix not in FORMATS:
            yield error("DATA002", key, f"{key}={path} is neither .jsonl nor .parquet",
                        "Data is read as JSON lines or a parquet table.", "Convert the file or point at one of those.")
        elif not resolved.is_file():
            yield error("DATA002", key, f"{key}={path} does not exist (looked at {resolved})",
                        "The run would fail when the first batch is read.",
                        "Fix the path (relative paths resolve from the current folder, then the project root).")
