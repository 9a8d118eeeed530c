"""Math with a Python tool: for GSM8K / DAPO-Math style rows whose ground truth is a number.

    data.environment.cls: "launcher.envs.code_math:CodeMathEnv"
    data.environment.config: {timeout_s: 10, memory_mb: 512, max_output_chars: 2000}   # the defaults

Each model turn either calls the tool or answers:
- A tool call, in GLM's own format as its chat template writes one (the first call named TOOL
  with a CODE_ARGUMENT), or, for models without it, the last fenced ```python block:

      <tool_call>python
      <arg_key>code</arg_key>
      <arg_value>print(6 * 7)</arg_value>
      </tool_call>

  runs in the sandbox (sandbox.run_python) while turns remain, and its output comes back as one
  role "tool" message wrapped in <tool_response> tags; reward 0, the episode goes on.
- Anything else, and any turn on the last one (max_turns, a call there included), is the final
  answer: the last \\boxed{...}, else the number after the last `####`, else the last number of
  the turn, compared with the ground truth by value ("1,000", "1000" and "1000.0" are equal).
  Reward 1.0 when equal else 0.0, metadata {"acc": equal}, done.

get_metrics() counts the episode's tool calls, those that failed (any reason but a timeout) and
those that timed out. The sandbox's limits come from data.environment.config; an unknown key there is
refused (ValueError) so that a misspelt limit is not silently the default.
"""
import re
import textwrap
from decimal import Decimal, InvalidOperation

from launcher.envs import sandbox
from launcher.rl.rewards import last_boxed

TOOL = "python"
CODE_ARGUMENT = "code"
DEFAULT_CONFIG = {"timeout_s": 10.0, "memory_mb": 512, "max_output_chars": 2000}
DEFAULT_MAX_TURNS = 4
NO_OUTPUT = "(no output: print() what you want to see)"

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_ARGUMENT = re.compile(r"<arg_key>\s*(.*?)\s*</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
_FENCED = re.compile(r"```(?:python3?|py)[ \t]*\n(.*?)```", re.DOTALL)
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")


def parse_tool_call(text: str, tool: str = TOOL, argument: str = CODE_ARGUMENT) -> str | None:
    """The code of the turn's tool call, or None when it has none: the first complete GLM call
    (`<tool_call>NAME` then `<arg_key>`/`<arg_value>` pairs; the closing </tool_call> may be
    missing) named `tool` with an `argument`, else the last closed ```python fenced block. The
    code is dedented, blank lines around it dropped."""
    for call in _TOOL_CALL.finditer(text):
        body = call.group(1)
        name = body.split("<arg_key>", 1)[0].strip()
        if name != tool:
            continue
        for key, value in _ARGUMENT.findall(body):
            if key == argument:
                return _tidy(value)
    blocks = _FENCED.findall(text)
    return _tidy(blocks[-1]) if blocks else None


def _tidy(code: str) -> str:
    return textwrap.dedent(code).strip("\n")


def tool_message(output: str) -> dict:
    """A tool's output as the observation message that follows the model's turn."""
    return {"role": "tool", "content": "<tool_response>\n" + (output.strip("\n") or NO_OUTPUT) + "\n</tool_response>"}


def final_number(text: str) -> Decimal | None:
    """The answer of a turn as a number: the last \\boxed{...}, else what follows the last
    `####`, else the whole text; in each, the last number (thousands commas allowed)."""
    boxed = last_boxed(text)
    if boxed is not None:
        where = boxed
    elif "####" in text:
        where = text.rsplit("####", 1)[1]
    else:
        where = text
    numbers = _NUMBER.findall(where.replace("$", ""))
    return _decimal(numbers[-1]) if numbers else None


def _decimal(number: str) -> Decimal | None:
    try:
        return Decimal(number.replace(",", ""))
    except InvalidOperation:
        return None


def same_number(response: str, ground_truth: str) -> bool:
    """True when the response's final number equals the ground truth's by value."""
    got, want = final_number(response), final_number(ground_truth)
    return got is not None and want is not None and got == want


class CodeMathEnv:
    """One episode: a math problem, a Python tool, and a scored final answer (see the module docstring)."""

    def __init__(self, env_config: dict | None = None, extras: dict | None = None):
        config = dict(env_config or {})
        unknown = sorted(set(config) - set(DEFAULT_CONFIG))
        if unknown:
            raise ValueError(f"CodeMathEnv: unknown data.environment.config keys {unknown} (it takes {sorted(DEFAULT_CONFIG)})")
        config = {**DEFAULT_CONFIG, **config}
        self.timeout_s = float(config["timeout_s"])
        self.memory_mb = int(config["memory_mb"])
        self.max_output_chars = int(config["max_output_chars"])
        extras = extras or {}
        try:
            self.ground_truth = str(extras["reward_spec"]["ground_truth"])
        except (KeyError, TypeError) as err:
            raise ValueError("CodeMathEnv needs extras['reward_spec']['ground_truth'] (the row's answer)") from err
        self.max_turns = int(extras.get("max_turns") or DEFAULT_MAX_TURNS)
        self.turns = 0
        self.tool_calls = self.tool_errors = self.tool_timeouts = 0

    @staticmethod
    def preflight(env_config: dict) -> None:
        """Before Ray starts (driver/loop/episodes.py): the sandbox must run `print(1)` here, so a
        machine where it cannot start refuses the run in seconds rather than failing every episode."""
        config = {**DEFAULT_CONFIG, **dict(env_config or {})}
        result = sandbox.run_python("print(1)", timeout_s=max(float(config["timeout_s"]), 5.0),
                                    memory_mb=int(config["memory_mb"]))
        if not result.ok or result.output.strip() != "1":
            raise RuntimeError(f"the Python sandbox cannot run print(1) here ({result.reason}): {result.output[-300:]}")

    def init(self, prompt: list[dict]) -> tuple[list[dict], dict]:
        self.turns = 0
        return prompt, {}

    def step(self, action: str) -> dict:
        self.turns += 1
        code = parse_tool_call(action)
        if code is not None and self.turns < self.max_turns:
            return self._run_tool(code)
        correct = same_number(action, self.ground_truth)
        return {"observations": [], "reward": float(correct), "done": True, "metadata": {"acc": correct}}

    def _run_tool(self, code: str) -> dict:
        result = sandbox.run_python(code, timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                                    max_output_chars=self.max_output_chars)
        self.tool_calls += 1
        self.tool_timeouts += result.reason == sandbox.TIMEOUT
        self.tool_errors += result.reason not in (None, sandbox.TIMEOUT)
        return {"observations": [tool_message(result.output)], "reward": 0.0, "done": False,
                "metadata": {"tool_reason": result.reason}}

    def get_metrics(self) -> dict:
        return {"tool_calls": self.tool_calls, "tool_errors": self.tool_errors, "tool_timeouts": self.tool_timeouts}

    def close(self) -> None:
        """Nothing is held between steps: each tool call's child and folder are gone when it returns."""
