"""Reward parsers (GSM8K `####`, DAPO `Answer:`, boxed answers, synthetic partial credit)
and math equivalence through math-verify."""
import pytest

from launcher.rl.rewards import (
    dapo_answer_line,
    gsm8k_final_number,
    last_boxed,
    math_equal,
    normalize_math_answer,
    score_boxed_math,
    score_dapo_math,
    score_exact_chars,
    score_gsm8k,
)
from launcher.rl.tasks import TASKS


@pytest.mark.parametrize("text, number", [
    ("She pays 3 * 4 = 12 dollars.\n#### 12", "12"),
    ("#### 1,234", "1234"),
    ("#### $5.50", "5.5"),
    ("#### -7", "-7"),
    ("first #### 3 then #### 4", "4"),
    ("no marker 12", None),
])
def test_gsm8k_final_number(text, number):
    assert gsm8k_final_number(text) == number


def test_gsm8k_score():
    assert score_gsm8k("so the total is 72\n#### 72", "Natalia sold 48/2 = 24 ... \n#### 72") == (1.0, True)
    assert score_gsm8k("#### 71", "#### 72") == (0.0, False)
    assert score_gsm8k("72", "#### 72") == (0.0, False)  # no marker in the response: not parsed


@pytest.mark.parametrize("response, answer, correct", [
    ("#### 72.00", "72", True),   # a number comparison: by value
    ("#### $1,234", "#### 1234", True),
    ("#### -0", "0", True),
    ("#### nan", "#### 1", False),
    ("#### 1e400", "#### 1", False),  # 10^400, not 1 followed by text
    ("#### 1e3", "1000", True),
    ("#### inf", "#### 1", False),
    ("#### \\frac{1}{2}", "0.5", False),  # GSM8K stays numbers, not LaTeX
])
def test_gsm8k_compares_numbers(response, answer, correct):
    assert score_gsm8k(response, answer) == (float(correct), correct)


@pytest.mark.parametrize("raw, normal", [
    ("\\boxed{3/4}", "3/4"),
    ("$5$", "5"),
    ("1,000", "1000"),
    ("12.0", "12"),
    ("\\text{42} ", "42"),
    ("\\dfrac{1}{2}.", "\\frac{1}{2}"),
    ("x + 1", "x+1"),
])
def test_normalize_math_answer(raw, normal):
    assert normalize_math_answer(raw) == normal


def test_dapo_answer_line_takes_the_last_one():
    assert dapo_answer_line("Answer: 3\nno wait\nAnswer: 4") == "4"
    assert dapo_answer_line("the answer is 4") is None


def test_dapo_math_score():
    assert score_dapo_math("work...\nAnswer: \\boxed{1,000}", "1000") == (1.0, True)
    assert score_dapo_math("Answer: 999", "1000") == (0.0, False)


@pytest.mark.parametrize("response", ["Answer: nan", "Answer: inf", "Answer: 1e400", "Answer: -inf", "Answer: NaN",
                                      "Answer: \\frac{1}{0}", "Answer: }", "Answer: \\boxed{", "Answer: $"])
def test_dapo_math_degenerate_answers_score_zero_without_raising(response):
    """These raised ValueError/OverflowError in normalize_math_answer (int(nan)) and ended the run."""
    assert score_dapo_math(response, "1") == (0.0, False)
    assert normalize_math_answer(response.removeprefix("Answer: ")) is not None


@pytest.mark.parametrize("response, answer", [
    ("Answer: x=3", "3"),
    ("Answer: x = 3", "3"),
    ("Answer: 34 degrees", "34"),
    ("Answer: 34^\\circ", "34"),
    ("Answer: 3\\sqrt2", "3\\sqrt{2}"),
    ("Answer: \\frac{1}{2}", "0.5"),
    ("Answer: 0.5", "\\frac{1}{2}"),
    ("Answer: 1/2", "\\dfrac12"),
    ("Answer: $\\boxed{5}$.", "5"),
    ("Answer: \\dfrac{1}{2}.", "\\frac12"),
    ("Answer: \\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}"),
    ("Answer: 1+x", "x+1"),
    ("Answer: 2, 3", "3, 2"),
    ("Answer: \\left(1, 2\\right)", "(1,2)"),
])
def test_dapo_math_accepts_equivalent_answers(response, answer):
    """Scored 0 by the old string normalisation; verl's math_dapo / math-verify accept them."""
    assert score_dapo_math(response, answer) == (1.0, True)


@pytest.mark.parametrize("response, answer", [
    ("Answer: 4", "3"),
    ("Answer: y=3", "x=3"),
    ("Answer: \\frac{1}{3}", "0.5"),
    ("Answer: 3\\sqrt3", "3\\sqrt{2}"),
    ("the answer is 3", "3"),  # no Answer: line
    ("Answer: " + "1" * 2000, "1" * 2000),  # past MAX_ANSWER_CHARS: not an answer
])
def test_dapo_math_rejects_wrong_or_missing_answers(response, answer):
    assert score_dapo_math(response, answer) == (0.0, False)


def test_boxed_answers():
    assert last_boxed("first \\boxed{1} then \\boxed{\\frac{a}{b}} done") == "\\frac{a}{b}"
    assert last_boxed("\\fbox{7}") == "7"
    assert last_boxed("\\boxed{unclosed") is None and last_boxed("no box") is None
    assert score_boxed_math("so we get $\\boxed{\\frac{1}{2}}$.", "0.5") == (1.0, True)
    assert score_boxed_math("\\boxed{3} no wait \\boxed{4}", "4") == (1.0, True)
    assert score_boxed_math("\\boxed{3} no wait \\boxed{4}", "3") == (0.0, False)
    assert score_boxed_math("the answer is 4", "4") == (0.0, False)
    assert score_boxed_math("\\boxed{nan}", "1") == (0.0, False)
    assert TASKS.get("math_boxed").score("\\boxed{x=3}", "3") == (1.0, True)


def test_math_equal_is_not_fooled_by_text_around_a_number():
    assert not math_equal("the answer is 5", "5")  # the whole answer text is parsed, not a number hunted in it
    assert math_equal("\\text{5}", "5")


@pytest.mark.parametrize("response, answer, reward, correct", [
    ("57", "57", 1.0, True),
    ("5x", "57", 0.5, False),
    ("5", "57", 0.5, False),
    ("577", "57", 2 / 3, False),
    ("", "57", 0.0, False),
    ("75", "57", 0.0, False),
])
def test_synthetic_partial_credit(response, answer, reward, correct):
    got = score_exact_chars(response, answer)
    assert got[0] == pytest.approx(reward) and got[1] is correct


def test_synthetic_tasks_are_deterministic_and_verifiable():
    for name in ("synthetic_copy", "synthetic_reverse", "synthetic_add"):
        task = TASKS.get(name)
        first = [task.generate(7, i) for i in range(20)]
        assert first == [task.generate(7, i) for i in range(20)]
        assert first != [task.generate(8, i) for i in range(20)]
        assert all(task.score(p.answer, p.answer) == (1.0, True) for p in first)
    copy = TASKS.get("synthetic_copy").generate(0, 0)
    assert copy.prompt == f"c{copy.answer}="
    add = TASKS.get("synthetic_add").generate(0, 0)
    a, b = add.prompt.rstrip("=").split("+")
    assert int(add.answer) == int(a) + int(b)


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(LookupError, match="gsm8k"):
        TASKS.get("gsm9k")
