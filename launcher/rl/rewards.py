"""Answer extraction and scoring for each task's responses.

Every scorer returns (reward, correct): reward is what the advantage sees (partial credit
where the task has a natural one), correct is exact success and feeds the accuracy metric.

Math answers are compared with math-verify (parse + verify on sympy expressions: `x=3` vs
3, `3\\sqrt2` vs `3\\sqrt{2}`, `\\frac{1}{2}` vs 0.5, `34^\\circ` vs 34), after a cheap
string normalisation that settles most answers without sympy. Each task only decides
where the answer is: DAPO-Math's last `Answer:` line, the last `\\boxed{}` (math_boxed).
GSM8K's number after `####` stays a number comparison. math-verify is imported on first
use (validation imports this file and must not pay for sympy).

A scorer may still raise or hang on a pathological response; the loops call it through
reward_fn.RewardScorer, which turns that into reward 0 and counts it.
"""
import logging
import math
import re
from decimal import Decimal, InvalidOperation

from launcher.rl import _deadline

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?")
MATH_VERIFY_TIMEOUT_S = 5
"""math-verify's own per-operation limit (int seconds, signal.alarm), used only when no
RewardScorer deadline is running and on the main thread (it raises elsewhere)."""
MAX_ANSWER_CHARS = 1000
"""A longer "answer" is not one: not handed to the LaTeX parser (verl's math_dapo keeps 300)."""


def _clean_number(text: str) -> str | None:
    match = _NUMBER.search(text.replace("$", ""))
    if match is None:
        return None
    value = match.group(0).replace(",", "")
    if "." in value and "e" not in value.lower():
        value = value.rstrip("0").rstrip(".")
    return value


def gsm8k_final_number(text: str) -> str | None:
    """The number after the last `####` (GSM8K's answer format), commas and `$` removed."""
    if "####" not in text:
        return None
    return _clean_number(text.rsplit("####", 1)[1])


def _same_number(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    try:
        return Decimal(a) == Decimal(b)
    except InvalidOperation:
        return a == b


def score_gsm8k(response: str, answer: str) -> tuple[float, bool]:
    want = gsm8k_final_number(answer) if "####" in answer else _clean_number(answer)
    correct = _same_number(gsm8k_final_number(response), want)
    return float(correct), correct


def _brace_end(text: str, open_at: int) -> int | None:
    """Index of the `}` closing the `{` at open_at, or None when it is never closed."""
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return None


def _unwrap(text: str, command: str) -> str:
    """Replace `\\command{x}` by `x` (one level of balanced braces)."""
    start = text.find(command + "{")
    while start != -1:
        open_at = start + len(command)
        end = _brace_end(text, open_at)
        if end is None:
            return text[:start] + text[open_at + 1:]
        text = text[:start] + text[open_at + 1:end] + text[end + 1:]
        start = text.find(command + "{")
    return text


def last_boxed(text: str) -> str | None:
    """Content of the last closed `\\boxed{...}` (or `\\fbox{...}`), braces balanced."""
    best = None
    for match in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        end = _brace_end(text, match.end() - 1)
        if end is not None and (best is None or match.start() > best[0]):
            best = (match.start(), text[match.end():end])
    return None if best is None else best[1]


def normalize_math_answer(text: str) -> str:
    """DAPO-style normalisation: unwrap \\boxed/\\text, drop $, spaces, trailing period,
    thousands separators and `\\left`/`\\right`; finite numbers compare by value."""
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
    if not math.isfinite(number):  # nan, inf, 1e400: compared as written
        return text.lower()
    return str(int(number)) if number == int(number) else str(number)


class _QuietTimeoutWarning(logging.Filter):
    """math-verify warns once that its timeouts are off; here a RewardScorer deadline is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


def load_math_verify():
    """The math_verify module (imported once), or ImportError saying how to install it."""
    try:
        import math_verify
    except ImportError as err:
        raise ImportError("math answers are scored with math-verify, which is not installed: "
                          "pip install 'math-verify[antlr4_9_3]' (the `rl` extra has it)") from err
    if not getattr(load_math_verify, "quiet", False):
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_QuietTimeoutWarning())
        load_math_verify.quiet = True
    return math_verify


def _answer_text(text: str) -> str:
    """Strip what surrounds an answer: spaces, a final period, `$...$`, an outer \\boxed."""
    text = text.strip().rstrip(".").strip().strip("$").strip()
    boxed = last_boxed(text)
    return (boxed if boxed is not None else text).strip()


def math_equal(pred: str, gold: str) -> bool:
    """Is the predicted answer (the extracted text, not a whole response) the gold one?

    Both are parsed as the content of a \\boxed{} (as verl's math_verify scorer wraps the
    gold), so math-verify reads the whole text as LaTeX rather than hunting for a number
    inside it."""
    pred, gold = _answer_text(pred), _answer_text(gold)
    if not pred or len(pred) > MAX_ANSWER_CHARS:
        return False
    if normalize_math_answer(pred) == normalize_math_answer(gold):
        return True
    mv = load_math_verify()
    limit = None if _deadline.armed() or not _deadline.on_main_thread() else MATH_VERIFY_TIMEOUT_S
    latex = [mv.LatexExtractionConfig()]
    gold_parsed = mv.parse("\\boxed{" + gold + "}", latex, parsing_timeout=limit)
    pred_parsed = mv.parse("\\boxed{" + pred + "}", latex, parsing_timeout=limit)
    return bool(gold_parsed and pred_parsed and mv.verify(gold_parsed, pred_parsed, timeout_seconds=limit))


def dapo_answer_line(response: str) -> str | None:
    """The text after the last `Answer:` (DAPO-Math's required final line)."""
    matches = re.findall(r"Answer:\s*(.+)", response, flags=re.IGNORECASE)
    return matches[-1].strip() if matches else None


def score_dapo_math(response: str, answer: str) -> tuple[float, bool]:
    """The last `Answer:` line against the reference, by math equivalence."""
    got = dapo_answer_line(response)
    correct = got is not None and math_equal(got, answer)
    return float(correct), correct


def score_boxed_math(response: str, answer: str) -> tuple[float, bool]:
    """The last `\\boxed{}` of the response against the reference, by math equivalence."""
    got = last_boxed(response)
    correct = got is not None and math_equal(got, answer)
    return float(correct), correct


def score_exact_chars(response: str, answer: str) -> tuple[float, bool]:
    """Partial credit for synthetic tasks: characters right in place over the longer length.

    Random-init models almost never produce an exact answer, so an exact-match reward would
    give GRPO groups with identical (zero) rewards and nothing to learn from.
    """
    longest = max(len(response), len(answer), 1)
    right = sum(a == b for a, b in zip(response, answer, strict=False))
    return right / longest, response == answer
