"""Rows of a data file as the run reads them: the prompt and answer columns (dotted keys for
nested fields), each row's prompt formatted (instruction, system prompt, chat template) and
counted in tokens, and why a row is bad.

One function, `measure_rows`, does it for both sides: the run's loader (driver/loop/data.py, over
the whole file in datasets' worker processes) and the validator's pre-flight
(validate/rules/data_preflight.py, over the first data.preflight_rows rows, with the same
tokenizer files read by the `tokenizers` library). What validate measures is therefore what
the run would keep or drop.
"""
from launcher.rl.prompts import BadPrompt, PromptFormatter, reference_answer

_MEMO_LIMIT = 1_000_000


def split_key(names, key: str) -> tuple[str, list[str]] | None:
    """(top-level column, fields inside it) of a possibly dotted key among the column `names`;
    a column whose own name holds dots wins over nesting. None when no column matches."""
    parts = key.split(".")
    for cut in range(len(parts), 0, -1):
        column = ".".join(parts[:cut])
        if column in names:
            return column, parts[cut:]
    return None


def dig(value, fields: list[str], what: str):
    """The field at `fields` inside a row's column value (None when a level is null)."""
    for i, name in enumerate(fields):
        if value is None:
            return None
        if not isinstance(value, dict):
            raise BadPrompt(f"{what}: {'.'.join([*fields[:i]]) or 'the column'} is a {type(value).__name__}, "
                            f"it has no field {name!r}")
        value = value.get(name)
    return value


def _memo_key(prompt):
    """A memo key of a prompt value: (hash, size) of its text or of its messages' texts."""
    if isinstance(prompt, str):
        return hash(prompt), len(prompt)
    if isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
        parts = tuple((m.get("role"), m.get("content")) for m in prompt)
        try:
            return hash(parts), sum(len(c) for _, c in parts if isinstance(c, str))
        except TypeError:  # unhashable contents: a bad row, formatted (and refused) each time
            return None
    return None


def measure_rows(formatter: PromptFormatter, task: str, prompt_fields: list[str], answer_fields: list[str],
                 prompts: list, answers: list, memo: dict | None = None) -> tuple[list[int], list[str]]:
    """(token count of each row's formatted prompt, -1 for a bad row; why each row is bad, ""
    when it is not) for the prompt and answer column values of a batch of rows.

    `memo` (prompt value's key -> token count) carries counts across batches: DAPO-Math-17k
    repeats each of its 17,917 prompts ~100 times and rendering the template is most of the
    cost. Exceptions other than BadPrompt (a chat template that raises) propagate."""
    memo = {} if memo is None else memo
    tokens, bad = [-1] * len(prompts), [""] * len(prompts)
    todo: dict = {}  # memo key -> (formatted text, rows)
    for r, (p, a) in enumerate(zip(prompts, answers, strict=True)):
        try:
            reference_answer(task, dig(a, answer_fields, "answer"))
            value = dig(p, prompt_fields, "prompt")
            key = _memo_key(value)
            if key is not None and key in memo:
                tokens[r] = memo[key]
            elif key is not None and key in todo:
                todo[key][1].append(r)
            else:
                todo[key if key is not None else ("row", r)] = (formatter.format(value), [r])
        except BadPrompt as err:
            bad[r] = str(err)
    if todo:
        counted = formatter.tokenizer.encode_batch([text for text, _ in todo.values()])
        for (key, (_, rows)), ids in zip(todo.items(), counted, strict=True):
            if key[0] != "row":
                memo[key] = len(ids)
            for r in rows:
                tokens[r] = len(ids)
    if len(memo) > _MEMO_LIMIT:
        memo.clear()
    return tokens, bad


def describe_formatting(formatter: PromptFormatter, data_cfg) -> str:
    """What a prompt's token count holds, in the load report's and validate's words."""
    parts = ["chat template" if formatter.templated else "raw text"]
    if formatter.instruction:
        parts.append(("data.instruction" if data_cfg.instruction else f"task {data_cfg.task}'s instruction")
                     + " where missing")
    if formatter.system_prompt:
        parts.append("data.system_prompt")
    return " + ".join(parts) + " counted"
