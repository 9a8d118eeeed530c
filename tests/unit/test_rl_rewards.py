"""Reward parsers (GSM8K `####`, DAPO `Answer:`, synthetic partial credit) by hand."""
import pytest

from launcher.rl.rewards import (
    dapo_answer_line,
    gsm8k_final_number,
    normalize_math_answer,
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
