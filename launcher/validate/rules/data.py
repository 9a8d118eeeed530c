"""Data rules: the task is registered, its files exist and have a readable format, a custom
reward's module is there, the named columns exist with usable types (read from the parquet
schema or the first JSON rows), and a checkpoint meant to chat has a chat template."""
import importlib.util
import json
from pathlib import Path
from typing import NamedTuple

from launcher.config import data_columns
from launcher.config.schema.choices import ChatTemplate
from launcher.paths import DATA_RULE, data_path_candidates, resolve_data_path
from launcher.validate.registry import error, rule, warning

FORMATS = (".jsonl", ".json", ".parquet")


def _tasks():
    from launcher.rl.tasks import TASKS  # pure Python: reward parsers and synthetic generators

    return TASKS


@rule("DATA001")
def task_registered(cfg, plan):
    """data.task names a registered task."""
    names = _tasks().names()
    if cfg.data.task not in names:
        yield error("data.task", f"data.task={cfg.data.task!r} is not a registered task",
                    "The task selects the reward function (and the generator for synthetic tasks).",
                    f"Use one of {names}.")


@rule("DATA002")
def files_exist(cfg, plan):
    """Train/val files exist as jsonl or parquet; file-less tasks are synthetic."""
    d, tasks = cfg.data, _tasks()
    task = tasks.get(d.task) if d.task in tasks.names() else None
    if task is not None and task.generate is None and d.train_path is None:
        yield error("data.train_path", f"data.train_path=null for task {d.task!r}",
                    f"{d.task} reads prompts from a file; only synthetic tasks generate their own.",
                    "Set data.train_path to a jsonl or parquet file.")
    for key, path in (("data.train_path", d.train_path), ("data.val_path", d.val_path)):
        if path is None:
            continue
        resolved = resolve_data_path(path)
        if resolved.suffix not in FORMATS:
            yield error(key, f"{key}={path} is not .jsonl, .json or .parquet",
                        "Data is read as JSON lines or a parquet table.", "Convert the file or point at one of those.")
        elif not resolved.is_file():
            looked = ", ".join(str(c.absolute()) for c in data_path_candidates(path))
            yield error(key, f"{key}={path} does not exist (looked at {looked})",
                        "The run would fail when the first batch is read.",
                        f"Fix the path: {DATA_RULE}; an absolute path is taken as it is.")


class RewardFnSpec(NamedTuple):
    """data.reward_fn read once for DATA003 (its form, its module's file) and DATA010
    (reward.py: its import), so DATA010 probes exactly what DATA003 let pass."""

    spec: str
    module: str | None
    """None when the spec is not of the form 'package.module:function'."""
    function: str | None
    file: Path | None
    """The module's file, found without importing it; None when not found or the form is wrong."""


def reward_fn_spec(cfg) -> RewardFnSpec | None:
    """cfg's data.reward_fn split and located (never imported); None when none is set."""
    spec = getattr(cfg.data, "reward_fn", None)
    if spec is None:
        return None
    from launcher.rl.reward_fn import RewardFnError, find_module_file, split_spec

    try:
        module, function = split_spec(spec)
    except RewardFnError:
        return RewardFnSpec(spec, None, None, None)
    return RewardFnSpec(spec, module, function, find_module_file(module))


@rule("DATA003")
def reward_fn_found(cfg, plan):
    """data.reward_fn is `module:function` and the module's file exists (never imported here)."""
    target = reward_fn_spec(cfg)
    if target is None:
        return
    spec, module, function, file = target
    if module is None:
        yield error("data.reward_fn", f"data.reward_fn={spec!r} is not of the form 'package.module:function'",
                    "The driver imports the module and calls the function by name for every response.",
                    "Write it as e.g. data.reward_fn=my_rewards:compute_score (a dotted module path, one colon, "
                    "a function name).")
        return
    if file is None:
        yield error("data.reward_fn", f"data.reward_fn={spec!r}: module {module!r} not found "
                    f"(no file for it on the path: the current folder {Path.cwd()} and PYTHONPATH)",
                    "The run would stop when it starts, importing the module to score the first responses.",
                    "Run from the folder holding the module, add its folder to PYTHONPATH, or fix the module name "
                    f"(the function {function!r} is only checked when the run starts).")


# What each key's column may hold: the loader (driver/loop/data.py load_problems) formats text or chat messages, and
# takes text or a number as the reference answer.
_COLUMN_KINDS = {"data.prompt_key": ("text", "messages"), "data.answer_key": ("text", "number")}


def _column_fix(option: str, key: str, col) -> str:
    if col.kind == "struct":
        inner = [n for n, c in col.fields.items() if c.kind in _COLUMN_KINDS[option]]
        prefer = "ground_truth" if "ground_truth" in inner else (inner[0] if inner else None)
        if prefer:
            return f"Name the field inside it: {option}={key}.{prefer} (its fields: {sorted(col.fields)})."
        return f"It is a struct with fields {sorted(col.fields)}; point {option} at a text field (dotted)."
    return f"Point {option} at a column holding {' or '.join(_COLUMN_KINDS[option])}, or convert the file."


@rule("DATA004")
def columns_usable(cfg, plan):
    """data.prompt_key / data.answer_key name columns of each data file, holding text or chat
    messages (prompt) and text or a number (answer)."""
    d = cfg.data
    for file_key, path in (("data.train_path", d.train_path), ("data.val_path", d.val_path)):
        if path is None or resolve_data_path(path).suffix not in FORMATS or not resolve_data_path(path).is_file():
            continue  # DATA002's finding
        if resolve_data_path(path).suffix == ".parquet" and importlib.util.find_spec("pyarrow") is None:
            yield warning(file_key, f"{file_key}={path}: its columns are not checked (pyarrow is not installed)",
                          "A parquet file's columns are read from its schema with pyarrow; without it a missing or "
                          "mistyped data.prompt_key / data.answer_key shows only when the run loads the file.",
                          "Install pyarrow beside the launcher (the `rl` extra has it) to check them here.")
            continue
        columns = data_columns.file_columns(resolve_data_path(path))
        if columns is None:
            continue
        for option, key in (("data.prompt_key", d.prompt_key), ("data.answer_key", d.answer_key)):
            try:
                col = data_columns.resolve(columns, key)
            except data_columns.NoColumn as missing:
                yield error(option, f"{option}={key!r}: in {path}, {missing.missing} "
                            f"(columns: {missing.available[:20]})",
                            "Every row would miss its prompt or answer: the run would refuse the file (or train on "
                            "empty prompts / score every response 0).",
                            f"Set {option} to one of those (dotted for a nested field, e.g. reward_model.ground_truth "
                            f"for verl's files, reward_spec.ground_truth for SkyRL's), or point {file_key} elsewhere.")
                continue
            if col.kind not in (*_COLUMN_KINDS[option], "null"):
                held = col.detail or ("a struct" if col.kind == "struct" else col.kind)
                yield error(option, f"{option}={key!r}: column {key} of {path} holds {held}, not "
                            f"{' or '.join(_COLUMN_KINDS[option])}",
                            "The prompt must be text or a list of chat messages ({role, content}); the reference "
                            "answer text or a number. Anything else would reach the model or the reward as Python "
                            "text and train on reward 0.",
                            _column_fix(option, key, col))


def _has_chat_template(folder: Path) -> bool | None:
    """Whether a checkpoint's tokenizer has a chat template; None without tokenizer_config.json."""
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        return None
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        return bool(json.loads(config.read_text()).get("chat_template"))
    except ValueError:
        return None


@rule("DATA005")
def chat_template_found(cfg, plan):
    """data.chat_template=auto with a checkpoint whose tokenizer has no chat template warns:
    its file prompts go in as raw text."""
    d = cfg.data
    folder = cfg.model.tokenizer_path or cfg.model.hf_path
    if d.chat_template != ChatTemplate.auto or folder is None or d.train_path is None:
        return
    if _has_chat_template(resolve_data_path(folder)) is False:
        yield warning("data.chat_template",
                      f"data.chat_template=auto but {folder}/tokenizer_config.json has no chat_template "
                      "(nor chat_template.jinja): prompts go to the model as raw text",
                      "A chat-tuned model answers badly without the turn tokens it was trained with; a base model "
                      "is fine with raw text.",
                      "Set data.chat_template=none to say raw text is meant, or add the model's chat template to "
                      "its tokenizer_config.json.")
