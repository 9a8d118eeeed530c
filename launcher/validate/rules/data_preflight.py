"""Data pre-flight rules: the first data.preflight_rows rows of each data file, formatted and
counted as the run counts them (launcher/validate/data_sample.py), against data.max_prompt_len,
inference.max_model_len and data.bad_rows. Everything the run's loader would stop on in those
rows is found here, before a run directory is written or Ray started."""
from launcher.config.schema.choices import BadRows
from launcher.validate.data_sample import data_sample
from launcher.validate.registry import error, rule, warning

_LISTED = 5


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%"


def _lengths(tokens: list[int]) -> str:
    ordered = sorted(tokens)
    return f"min {ordered[0]} / median {ordered[len(ordered) // 2]} / max {ordered[-1]}"


def _sampled(f) -> str:
    """`the first 64 rows (of 64)` / `the first 1000 rows`."""
    of = f" of {f.rows_in_file:,}" if f.rows_in_file is not None else ""
    return f"the first {f.rows_sampled:,} rows{of}"


@rule("DATA006")
def preflight_ran(cfg, plan):
    """The data pre-flight could read the tokenizer (its tokenizer.json, without transformers)
    and render the chat template on the sampled prompts."""
    sample = data_sample(cfg)
    if sample is None:
        return
    if sample.skipped:
        yield warning(sample.tokenizer_key or "model.tokenizer_path",
                      f"prompt lengths of the data files are not checked: {sample.skipped}",
                      "validate counts prompts with the tokenizer's tokenizer.json and chat template (no "
                      "transformers); without them a data.max_prompt_len that drops every prompt shows only when "
                      "the run loads its data.",
                      "Point model.tokenizer_path at a folder with tokenizer.json (what save_pretrained of a fast "
                      "tokenizer writes), or set data.preflight_rows=0 to say the check is not wanted.")
    for f in sample.files:
        if f.render_error:
            yield error("data.chat_template", f"{f.key}={f.path}: the chat template of {sample.tokenizer} fails on "
                        f"a sampled prompt: {f.render_error}",
                        "The run renders every prompt with the same template when it loads the file, and would stop "
                        "there.",
                        "Fix the template (tokenizer_config.json's chat_template or chat_template.jinja), the rows' "
                        "messages, or set data.chat_template=none for raw text.")


@rule("DATA007")
def prompts_fit(cfg, plan):
    """The sampled prompts, formatted as the run formats them, fit data.max_prompt_len: an
    error when none does (the run would find no prompt left), a warning with the share that
    the run would drop when some do not."""
    sample = data_sample(cfg)
    if sample is None:
        return
    limit = cfg.data.max_prompt_len
    for f in sample.files:
        if not f.tokens:
            continue
        over = [t for t in f.tokens if t > limit]
        if not over:
            continue
        need = max(f.tokens)
        counted = (f"{len(over):,} of {len(f.tokens):,} sampled prompts ({_sampled(f)}) are longer than "
                   f"data.max_prompt_len={limit} tokens; lengths {_lengths(f.tokens)} ({sample.formatting} with "
                   f"{sample.tokenizer})")
        fix = (f"Raise data.max_prompt_len to {need} (the longest sampled; inference.max_model_len >= {need} + "
               f"algorithm.max_response_len {cfg.algorithm.max_response_len} = {need + cfg.algorithm.max_response_len}"
               "), or shorten the prompts, data.system_prompt or data.instruction.")
        if len(over) == len(f.tokens):
            yield error("data.max_prompt_len", f"{f.key}={f.path}: no prompt fits: {counted}",
                        "The run drops every prompt longer than data.max_prompt_len when it loads the file; with none "
                        "left it could not train (or evaluate) on this file.", fix)
        else:
            yield warning("data.max_prompt_len", f"{f.key}={f.path}: {_pct(len(over), len(f.tokens))} of prompts "
                          f"would be dropped: {counted}",
                          "The run drops each prompt longer than data.max_prompt_len; the dropped ones are usually "
                          "the hardest problems, and the share trained on is smaller than the file.", fix)


@rule("DATA008")
def prompts_leave_room(cfg, plan):
    """The sampled prompts the run would keep leave room for algorithm.max_response_len
    within inference.max_model_len: an error when none does, a warning with the share."""
    sample = data_sample(cfg)
    if sample is None:
        return
    limit, response, total = cfg.data.max_prompt_len, cfg.algorithm.max_response_len, cfg.inference.max_model_len
    for f in sample.files:
        kept = [t for t in f.tokens if t <= limit]
        if not kept:
            continue
        short = [t for t in kept if t + response > total]
        if not short:
            continue
        what = (f"{len(short):,} of {len(kept):,} sampled prompts that fit data.max_prompt_len={limit} leave no room "
                f"for algorithm.max_response_len={response} within inference.max_model_len={total}; their lengths "
                f"{_lengths(short)}")
        why = ("An engine is asked for prompt + max_response_len tokens; past max_model_len vLLM refuses the request "
               "and the step fails.")
        fix = f"Set inference.max_model_len >= {max(short) + response}, or lower data.max_prompt_len to {total - response}."
        if len(short) == len(kept):
            yield error("inference.max_model_len", f"{f.key}={f.path}: {what}", why, fix)
        else:
            yield warning("inference.max_model_len", f"{f.key}={f.path}: {_pct(len(short), len(kept))}: {what}",
                          why, fix)


def _blamed_key(bad: list[str]) -> str:
    """The key of the column every bad row fails on (`<where>: answer is null`): with no row
    left, that key is what to fix; rows bad for mixed reasons blame the prompt column."""
    return "data.answer_key" if all(": answer " in b for b in bad) else "data.prompt_key"


@rule("DATA009")
def sampled_rows_good(cfg, plan):
    """The sampled rows have a usable prompt and answer: a bad row is an error under
    data.bad_rows=error (the run refuses the file), a warning under skip, and an error when
    every sampled row is bad."""
    sample = data_sample(cfg)
    if sample is None:
        return
    mode = BadRows(getattr(cfg.data.bad_rows, "value", cfg.data.bad_rows))
    for f in sample.files:
        if not f.bad:
            continue
        listed = "; ".join(f.bad[:_LISTED]) + (f" ... and {len(f.bad) - _LISTED:,} more" if len(f.bad) > _LISTED else "")
        what = f"{f.key}={f.path}: {len(f.bad):,} bad rows in {_sampled(f)}: {listed}"
        fix = (f"Fix those rows, or data.prompt_key={cfg.data.prompt_key!r} / data.answer_key={cfg.data.answer_key!r} "
               "if they name the wrong columns" + ("; data.bad_rows=skip trains on the rest." if mode is BadRows.error
                                                   else "."))
        if mode is BadRows.error or not f.tokens:
            yield error("data.bad_rows" if f.tokens else _blamed_key(f.bad), what,
                        "The run refuses a file with bad rows under data.bad_rows=error, and has nothing to train on "
                        "when every row is bad.", fix)
        else:
            yield warning("data.bad_rows", what, "data.bad_rows=skip drops them when the run loads the file.", fix)
