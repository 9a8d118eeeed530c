"""Tasks by name (`data.task`): how a response is scored and, for synthetic tasks, the problems.

Synthetic problems are a pure function of (seed, index), so a data position is one integer
and a resumed run sees exactly the problems an uninterrupted one would.
"""
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from launcher.registry import Registry
from launcher.rl import rewards


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str
    data_source: str | None = None
    """The row's `data_source` column (verl's name) when the data has one; a custom
    `data.reward_fn` gets it, or data.task when it is None."""
    extra_info: dict | None = field(default=None, hash=False)
    """The row's `extra_info` column (verl's name), passed to a custom `data.reward_fn`."""


@dataclass(frozen=True)
class Task:
    name: str
    score: Callable[[str, str], tuple[float, bool]]
    """(response text, reference answer) -> (reward, exactly correct)."""
    generate: Callable[[int, int], Problem] | None = None
    """(seed, index) -> problem, for tasks that need no data file."""
    prepare: Callable[[], object] | None = None
    """Called once when a run starts: imports what `score` needs (an ImportError then, not
    a timed-out first response)."""


TASKS: Registry[Task] = Registry("task")


def _add(task: Task) -> None:
    TASKS.register(task.name)(task)


# A fixed two digits: sequences stay under 10 tokens, 100 distinct strings make the model
# read the prompt, and every answer has the same length, so a response cut at
# max_response_len = 2 needs no EOS (with mixed lengths the tiny model must also learn
# where to stop, which took it 3x the steps).
SYNTHETIC_DIGITS = 2


def _digits(seed: int, index: int) -> str:
    rng = random.Random(f"{seed}:{index}")
    return "".join(rng.choice("0123456789") for _ in range(SYNTHETIC_DIGITS))


def _copy(seed: int, index: int) -> Problem:
    s = _digits(seed, index)
    return Problem(prompt=f"c{s}=", answer=s)


def _reverse(seed: int, index: int) -> Problem:
    s = _digits(seed, index)
    return Problem(prompt=f"r{s}=", answer=s[::-1])


def _add_digits(seed: int, index: int) -> Problem:
    """a + b of single digits, the sum zero-padded to two digits like the other tasks."""
    rng = random.Random(f"{seed}:{index}")
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return Problem(prompt=f"{a}+{b}=", answer=f"{a + b:02d}")


_add(Task("gsm8k", rewards.score_gsm8k))
_add(Task("dapo_math", rewards.score_dapo_math, prepare=rewards.load_math_verify))
_add(Task("math_boxed", rewards.score_boxed_math, prepare=rewards.load_math_verify))
_add(Task("synthetic_copy", rewards.score_exact_chars, _copy))
_add(Task("synthetic_reverse", rewards.score_exact_chars, _reverse))
_add(Task("synthetic_add", rewards.score_exact_chars, _add_digits))
