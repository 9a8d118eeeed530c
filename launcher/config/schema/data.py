"""`data:` section: prompts, reference answers and the reward that scores responses."""
from dataclasses import dataclass, field
from typing import Optional

from launcher.config.schema.choices import BadRows, ChatTemplate
from launcher.config.schema.env import EnvConfig


@dataclass
class DataConfig:
    task: str = "synthetic_copy"
    """Registered task name: selects the reward function and, for synthetic tasks, the
    generator (gsm8k, dapo_math, synthetic_*). Unknown names are a validation error."""
    train_path: Optional[str] = None
    """.jsonl, .json or .parquet file of training prompts; null only for synthetic tasks.
    Read with HF `datasets` (local files only) into an Arrow-backed table indexed lazily, so
    a 1.8M-row file costs no per-row Python objects. Accepted layouts: plain columns
    (openai/gsm8k: question / answer), verl's (prompt = list of chat messages,
    reward_model.ground_truth, data_source, extra_info) and SkyRL's (reward_spec.ground_truth);
    data_source and extra_info columns, when present, reach a custom data.reward_fn. A relative
    path is looked up in the current folder, then each LAUNCHER_CONFIG_ROOTS folder (last first),
    then the launcher's shipped data (the `data/...` files the shipped recipes name)."""
    val_path: Optional[str] = None
    """Optional held-out file, same format as train_path."""
    prompt_key: str = "prompt"
    """Column holding the prompt: a string, or a list of chat messages ({role, content},
    verl's and SkyRL's `prompt`). Dotted for a field of a struct column (`a.b`)."""
    answer_key: str = "answer"
    """Column holding the reference answer the reward compares against (text or a number);
    dotted for nested columns: reward_model.ground_truth (verl), reward_spec.ground_truth
    (SkyRL). For data.task=gsm8k the text after the last `####` is taken (openai/gsm8k's
    answer column holds the whole solution)."""
    max_prompt_len: int = 512
    """Prompt tokens kept (longer prompts are dropped, and counted in the load report); the
    formatted prompt is measured: instruction, system prompt and chat-template tokens
    included. With algorithm.max_response_len it bounds the sequence length checked against
    inference.max_model_len and trainer.max_tokens_per_microbatch. Synthetic tasks'
    generated prompts are not filtered."""
    preflight_rows: int = 1000
    """Rows of data.train_path and data.val_path (the first ones, in file order) that
    `validate` (and so every run, before Ray starts) reads, formats exactly as the run does
    (instruction, system prompt, chat template) and counts with the run's tokenizer (its
    tokenizer.json, read without transformers): none fitting data.max_prompt_len is an
    error, some not fitting a warning with the share, bad rows are named by file and row,
    and `validate --format json` reports the length distribution under "data". The run
    still measures every row when it loads the file (before Ray). 0 = no sample."""
    chat_template: ChatTemplate = ChatTemplate.auto
    """`auto`: a file's prompts go through the tokenizer's chat template
    (apply_chat_template(messages, add_generation_prompt=True)) when model.hf_path's tokenizer
    has one, so the model sees [gMASK]<sop><|user|>...<|assistant|>; raw text when it has none
    (the character tokenizer of a random-init model never has one). Synthetic tasks' generated
    prompts stay raw text under `auto` (they are not chat turns). `none`: raw text always; a
    list of messages then becomes its contents joined by blank lines."""
    system_prompt: Optional[str] = None
    """A system message put before every prompt from a file that has none of its own (a
    row's own system message wins); with the template off it is the first paragraph of the
    raw text. null = none."""
    instruction: Optional[str] = None
    """Text added to each prompt's last user message. null = the task's own (gsm8k: think
    step by step, final answer after "####"; dapo_math: its "Answer:" line; math_boxed:
    \\boxed{}; synthetic and other tasks: none); "" = none. `{prompt}` marks where the
    prompt goes; without it the instruction is appended after a blank line (on the command
    line quote a value with braces: data.instruction='Q: {prompt} A:'). Not added to a
    prompt that already contains it (verl's, SkyRL's and DAPO-Math's files carry it)."""
    bad_rows: BadRows = BadRows.error
    """A malformed JSON line, or a row whose prompt or answer is missing, null, empty or of
    the wrong type: `error` (default) refuses the file listing each bad row with its file and
    row (a bad row usually means a wrong file or key, and training on the rest would hide it);
    `skip` drops them and reports each. jsonl rows are named by line number (1-based), parquet
    and .json-array rows by row index (0-based)."""
    reward_fn: Optional[str] = None
    """Custom reward "package.module:function" replacing data.task's scorer (the task still
    picks the generator of synthetic tasks). verl's signature, called with keywords:
    fn(data_source, solution_str, ground_truth, extra_info) -> float | dict with "score"
    (and optionally "acc"); launcher/rl/reward_fn.py says what each argument holds.
    Imported once in the driver when the run starts (the current directory and PYTHONPATH
    are on its path); validation checks the form and that the module file exists without
    importing it. A call that raises or takes over 5 s scores 0 and is counted in
    reward_errors. null = the task's own scorer."""
    environment: EnvConfig = field(default_factory=EnvConfig)
    """Multi-turn episodes with tools (data.environment.cls); off by default: one response per prompt."""
