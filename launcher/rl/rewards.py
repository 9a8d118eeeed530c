"""Answer extraction and scoring for each task's responses.

Every scorer returns (reward, correct): reward is what the advantage sees (partial credit
where the task has a natural one), correct is exact success and feeds the accuracy metric.
"""
import re

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _clean_number(text: str) -> str | None:
    match = _NUMBER.search(text.replace("$", ""))
    if match is None:
        return None
    value = match.group(0).replace(",", "")
    if "." in value:
        value = value.rstrip("0").rstrip(".")
    return value


def gsm8k_final_number(text: str) -> str | None:
    """The number after the last `####` (GSM8K's answer format), commas and `$` removed."""
    if "####" not in text:
        return None
    return _clean_number(text.rsplit("####", 1)[1])


def score_gsm8k(response: str, answer: str) -> tuple[float, bool]:
    want = gsm8k_final_number(answer) if "####" in answer else _clean_number(answer)
    got = gsm8k_final_number(response)
    correct = got is not None and got == want
    return float(correct), correct


def _unwrap(text: str, command: str) -> str:
    """Replace `\\command{x}` by `x` (one level of balanced braces)."""
    start = text.find(command + "{")
    while start != -1:
        depth, i = 0, start + len(command)
        for i in range(start + len(command), len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
        inner = text[start + len(command) + 1:i]
        text = text[:start] + inner + text[i + 1:]
        start = text.find(command + "{")
    return text


def normalize_math_answer(text: str) -> str:
    """DAPO-style normalisation: unwrap \\boxed/\\text, drop $, spaces, trailing period,
    thousands separators and `\\left`/`\\right`; numbers compare by value."""
    text = text.strip()
    for command in ("\\boxed", "\\text", "\\mathrm", "\\textbf"):
        text = _unwrap(text, command)
    for token in ("$", "\\left", "\\right", "\\!", "\\,", " "):
        text = text.replace(token, "")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number == int(number) else str(number)


def dapo_answer_line(response: str) -> str | None:
    """The text after the last `Answer:` (DAPO-Math's required final line)."""
    matches = re.findall(r"Answer:\s*(.+)", response, flags=re.IGNORECASE)
    return matches[-1].strip() if matches else None


def score_dapo_math(response: str, answer: str) -> tuple[float, bool]:
    got = dapo_answer_line(response)
    correct = got is not None and normalize_math_answer(got) == normalize_math_answer(answer)
    return float(correct), correct


def score_exact_chars(response: str, answer: str) -> tuple[float, bool]:
    """Partial credit for synthetic tasks: characters right in place over the longer length.

    Random-init models almost never produce an exact answer, so an exact-match reward would
    give GRPO groups with identical (zero) rewards and nothing to learn from.
    """
    longest = max(len(response), len(answer), 1)
    right = sum(a == b for a, b in zip(response, answer, strict=False))
    return right / longest, response == answer
