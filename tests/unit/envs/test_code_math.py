"""CodeMathEnv with real sandboxed tool calls: both call formats, the scored final answer, the
last turn, the metrics, and the tool-call parser on its own."""
import pytest

from launcher.envs.code_math import CodeMathEnv, final_number, parse_tool_call, same_number


def _glm_call(code: str) -> str:
    """A tool call as GLM's chat template writes one."""
    return f"Let me compute.\n<tool_call>python\n<arg_key>code</arg_key>\n<arg_value>{code}</arg_value>\n</tool_call>"


def _env(answer: str = "42", max_turns: int = 4, **config) -> CodeMathEnv:
    env = CodeMathEnv({"timeout_s": 1, **config}, {"reward_spec": {"ground_truth": answer}, "extra_info": {},
                                                   "max_turns": max_turns})
    prompt = [{"role": "user", "content": "What is 6 * 7?"}]
    assert env.init(prompt) == (prompt, {})
    return env


def test_a_glm_tool_call_runs_and_returns_a_tool_observation():
    out = _env().step(_glm_call("print(6 * 7)"))
    assert out["observations"] == [{"role": "tool", "content": "<tool_response>\n42\n</tool_response>"}]
    assert (out["reward"], out["done"]) == (0.0, False)


def test_a_fenced_python_block_runs_too():
    out = _env().step("I will check:\n```python\nx = 6\nprint(x * 7)\n```\n")
    assert out["observations"][0]["content"] == "<tool_response>\n42\n</tool_response>" and not out["done"]


def test_a_boxed_answer_scores_one_and_a_wrong_one_zero():
    assert _env().step("So the answer is \\boxed{42}.") == {"observations": [], "reward": 1.0, "done": True,
                                                           "metadata": {"acc": True}}
    wrong = _env().step("So the answer is \\boxed{41}.")
    assert (wrong["reward"], wrong["done"], wrong["metadata"]) == (0.0, True, {"acc": False})


def test_the_last_turn_scores_even_with_a_tool_call():
    env = _env(max_turns=2)
    assert not env.step(_glm_call("print(40 + 2)"))["done"]
    out = env.step("\\boxed{42} but let me check again\n" + _glm_call("print(42)"))
    assert (out["reward"], out["done"], out["metadata"]) == (1.0, True, {"acc": True})
    assert env.get_metrics()["tool_calls"] == 1


def test_metrics_count_calls_errors_and_timeouts():
    env = _env(max_turns=10)
    env.step(_glm_call("print(1)"))
    error = env.step(_glm_call("1 / 0"))["observations"][0]["content"]
    timeout = env.step(_glm_call("while True:\n    pass"))["observations"][0]["content"]
    silent = env.step(_glm_call("x = 1"))["observations"][0]["content"]
    assert "ZeroDivisionError: division by zero\n</tool_response>" in error
    assert "[timed out after 1 s]" in timeout and "no output" in silent
    assert env.get_metrics() == {"tool_calls": 4, "tool_errors": 1, "tool_timeouts": 1}
    env.close()


def test_the_answer_is_the_boxed_then_the_gsm8k_then_the_last_number():
    assert final_number("1 then \\boxed{1,000} then 7") == 1000
    assert final_number("work: 3 + 4\n#### 1000.0") == 1000
    assert final_number("It is 12, no, 13.") == 13 and final_number("no digits") is None
    assert same_number("\\boxed{1,000}", "1000") and same_number("#### -2.50", "-2.5")
    assert same_number("work\n#### 72", "Natalia sold 48/2 = 24 clips.\n#### 72")  # a GSM8K solution as truth
    assert not same_number("\\boxed{}", "0")


def test_the_parser_reads_glm_calls_and_fenced_blocks():
    assert parse_tool_call(_glm_call("\n    x = 2\n    print(x)\n")) == "x = 2\nprint(x)"
    assert parse_tool_call(_glm_call("print(1)") + _glm_call("print(2)")) == "print(1)"  # the first call
    assert parse_tool_call("<tool_call>search\n<arg_key>code</arg_key>\n<arg_value>q</arg_value></tool_call>") is None
    assert parse_tool_call("<tool_call>python\n<arg_key>code</arg_key>\n<arg_value>print(3)</arg_value>") == "print(3)"
    assert parse_tool_call("```python\nprint(1)\n```\nthen\n```py\nprint(2)\n```") == "print(2)"  # the last block
    assert parse_tool_call("```python\nprint(1)\n") is None and parse_tool_call("```\nprint(1)\n```") is None
    assert parse_tool_call("The answer is \\boxed{42}.") is None


def test_a_misspelt_config_key_and_a_missing_ground_truth_are_refused():
    with pytest.raises(ValueError, match="timeout"):
        CodeMathEnv({"timeout": 5}, {"reward_spec": {"ground_truth": "1"}})
    with pytest.raises(ValueError, match="ground_truth"):
        CodeMathEnv({}, {"extra_info": {}})
    assert CodeMathEnv(None, {"reward_spec": {"ground_truth": "1"}}).max_turns == 4
