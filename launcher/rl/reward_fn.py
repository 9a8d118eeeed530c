"""Scoring responses in the driver: the task's scorer, or the user's `data.reward_fn`.

    data.reward_fn: "my_pkg.rewards:compute_score"      # imported once when the run starts

A custom reward has verl's signature and is called with keywords:

    compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict)
        -> float | dict

- data_source: the row's `data_source` column when the data loader provides it
  (Problem.data_source), else data.task.
- solution_str: the decoded response (no prompt).
- ground_truth: the reference answer (the data.answer_key column, or a synthetic task's answer).
- extra_info: the row's `extra_info` column (Problem.extra_info), else {} (a copy: the
  function may change it).

A float (or bool) is the reward; correct (the accuracy metric) is reward >= 1. A dict must
have "score" (the reward); correct is bool(d["acc"]) when present, else score >= 1; other
keys are ignored. The module is found the way `import` finds it: the driver's sys.path,
which holds the current directory under `python -m launcher` and PYTHONPATH.

No response ends a run: a scorer (built-in or custom) that raises, runs past
REWARD_TIMEOUT_S, or returns a non-finite or non-numeric reward scores 0, the response is
counted in the step's `reward_errors` metric, and the first LOGGED_ERRORS are printed to
stderr (the error and the start of the response).
"""
import copy
import importlib
import inspect
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from launcher.rl._deadline import RewardTimeout, call_with_deadline
from launcher.rl.tasks import TASKS, Problem, Task

REWARD_TIMEOUT_S = 5.0
"""Per response, for the built-in scorers and a custom data.reward_fn alike."""
LOGGED_ERRORS = 5
RESPONSE_CHARS = 120
KEY = "data.reward_fn"
KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")
"""What every call passes, by keyword (verl's signature)."""
SPEC = re.compile(r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):(?P<function>[A-Za-z_]\w*)$")


class RewardFnError(ValueError):
    """data.reward_fn cannot be used (malformed, not importable, not callable)."""


def split_spec(spec: str) -> tuple[str, str]:
    """"pkg.mod:fn" -> ("pkg.mod", "fn"); RewardFnError for any other form."""
    match = SPEC.match(spec.strip())
    if match is None:
        raise RewardFnError(f"{KEY}={spec!r} is not of the form 'package.module:function'")
    return match["module"], match["function"]


def find_module_file(module: str) -> Path | None:
    """The file (or package folder) `import module` would load, found without running any
    of the user's code: only the top-level name goes through importlib's finders (a
    find_spec of a dotted name imports its parent packages, running their __init__); the
    rest of the path is looked up on disk under the package's folders. None when absent."""
    import importlib.util

    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin not in (None, "built-in", "frozen") else _first(spec)
    folders = [Path(p) for p in (spec.submodule_search_locations or [])]
    for i, part in enumerate(rest):
        last = i == len(rest) - 1
        found = None
        for folder in folders:
            if last and (folder / f"{part}.py").is_file():
                return folder / f"{part}.py"
            if (folder / part).is_dir():
                found = folder / part
                break
        if found is None:
            return None
        folders = [found]
    return (found / "__init__.py") if (found / "__init__.py").is_file() else found  # package or namespace


def _first(spec) -> Path | None:
    locations = list(spec.submodule_search_locations or [])
    return Path(locations[0]) if locations else None


def load_reward_fn(spec: str) -> Callable:
    """Import `module:function` once; RewardFnError naming the key, module and function."""
    module_name, function = split_spec(spec)
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - any import-time failure of user code, with its cause
        raise RewardFnError(f"{KEY}={spec!r}: cannot import module {module_name!r} "
                            f"({type(err).__name__}: {err}); it is looked up on the driver's sys.path "
                            "(the current directory and PYTHONPATH)") from err
    fn = getattr(module, function, None)
    if fn is None:
        raise RewardFnError(f"{KEY}={spec!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) "
                            f"has no attribute {function!r}")
    if not callable(fn):
        raise RewardFnError(f"{KEY}={spec!r}: {module_name}.{function} is a {type(fn).__name__}, not a function")
    if (problem := _signature_problem(fn)) is not None:
        raise RewardFnError(f"{KEY}={spec!r}: {module_name}.{function} cannot be called with verl's keywords "
                            f"{', '.join(KEYWORDS)} ({problem}): every call would raise and score 0")
    return fn


def _signature_problem(fn: Callable) -> str | None:
    """Why fn cannot take the keywords every call passes, or None (also when it has no
    signature to read, such as a C function: its calls will tell)."""
    try:
        inspect.signature(fn).bind(**dict.fromkeys(KEYWORDS))
    except TypeError as err:
        return str(err)
    except ValueError:
        return None
    return None


@dataclass(frozen=True)
class Score:
    reward: float
    correct: bool
    error: str | None = None
    """Why the reward is 0 by force (exception, timeout, bad return value), else None."""


def _finite(value, what: str) -> float:
    if isinstance(value, str | bytes) or value is None:
        raise TypeError(f"{what} is {type(value).__name__} {value!r:.40}, expected a number")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{what} is {number}, expected a finite number")
    return number


def custom_score(value) -> tuple[float, bool]:
    """A verl-style return value (float | bool | dict with "score", maybe "acc") -> (reward, correct)."""
    if isinstance(value, Mapping):
        if "score" not in value:
            raise ValueError(f"returned a dict without 'score' (keys {sorted(map(str, value))})")
        reward = _finite(value["score"], "'score'")
        return reward, bool(value["acc"]) if "acc" in value else reward >= 1.0
    reward = _finite(value, "the returned reward")
    return reward, reward >= 1.0


class RewardScorer:
    """What the loops call per response: `score(response, problem) -> Score`, never raising
    (except KeyboardInterrupt and the like). `errors` counts forced zeros so far."""

    def __init__(self, task: Task, reward_fn: str | None = None, data_source: str | None = None,
                 timeout_s: float = REWARD_TIMEOUT_S, log=None):
        self.task, self.spec, self.timeout_s = task, reward_fn, timeout_s
        self.data_source = data_source if data_source is not None else task.name
        self.fn = load_reward_fn(reward_fn) if reward_fn else None
        if self.fn is None and task.prepare is not None:
            task.prepare()
        self.log = log
        self.errors = 0

    @property
    def source(self) -> str:
        return f"{KEY}={self.spec}" if self.fn is not None else f"data.task={self.task.name}"

    def _call(self, response: str, problem: Problem) -> tuple[float, bool]:
        if self.fn is None:
            reward, correct = self.task.score(response, problem.answer)
            return _finite(reward, "the reward"), bool(correct)
        return custom_score(self.fn(data_source=problem.data_source or self.data_source, solution_str=response,
                                    ground_truth=problem.answer, extra_info=copy.deepcopy(problem.extra_info or {})))

    def score(self, response: str, problem: Problem) -> Score:
        try:
            reward, correct = call_with_deadline(lambda: self._call(response, problem), self.timeout_s)
            return Score(reward, correct)
        except RewardTimeout:
            return self._failed(f"timed out after {self.timeout_s:g} s", response)
        except Exception as err:  # noqa: BLE001 - a reward never ends a run: scored 0 and counted
            return self._failed(f"{type(err).__name__}: {err}", response)

    def _failed(self, error: str, response: str) -> Score:
        self.errors += 1
        if self.errors <= LOGGED_ERRORS:
            out = self.log or sys.stderr
            snippet = response if len(response) <= RESPONSE_CHARS else response[:RESPONSE_CHARS] + "..."
            out.write(f"reward error ({self.source}), scored 0: {error[:300]}; response {snippet!r}\n")
            if self.errors == LOGGED_ERRORS:
                out.write(f"reward errors: only counted from here on (reward_errors in metrics; {self.source})\n")
        return Score(0.0, False, error)


def make_scorer(data_cfg) -> RewardScorer:
    """The run's scorer, built once when the run starts (so a bad data.reward_fn fails here)."""
    return RewardScorer(TASKS.get(data_cfg.task), getattr(data_cfg, "reward_fn", None), data_source=data_cfg.task)


def as_scorer(scorer_or_task) -> RewardScorer:
    """A RewardScorer as it is; a bare Task wrapped in one (tests that score without a run)."""
    return scorer_or_task if isinstance(scorer_or_task, RewardScorer) else RewardScorer(scorer_or_task)
