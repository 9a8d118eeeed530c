"""The Python sandbox with real children: output, tracebacks, the timeout (and that nothing
survives it), the memory and output caps, the network guard, the environment and the folder."""
import time
from pathlib import Path

import pytest

from launcher.envs.sandbox import ERROR, MEMORY, NETWORK_DISABLED, OUTPUT, TIMEOUT, SandboxResult, run_python


def _gone(pid: int, within_s: float = 2.0) -> bool:
    """The process has ended (a zombie left for init to reap counts as ended)."""
    psutil = pytest.importorskip("psutil")
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def test_prints_and_returns_the_output():
    result = run_python("print(6 * 7)\nimport sys\nprint('to stderr', file=sys.stderr)")
    assert result == SandboxResult(ok=True, output="42\nto stderr\n", reason=None, exit_code=0)


def test_an_exception_gives_the_traceback_ending_in_its_message():
    result = run_python("x = 1\nx / 0")
    assert (result.ok, result.reason, result.exit_code) == (False, ERROR, 1)
    assert result.output.rstrip().splitlines()[-1] == "ZeroDivisionError: division by zero"
    assert 'File "main.py", line 2' in result.output and "<string>" not in result.output  # no prelude frame


def test_a_syntax_error_and_a_non_zero_exit_are_errors():
    assert run_python("print('a'").output.rstrip().endswith("SyntaxError: '(' was never closed")
    result = run_python("import sys\nsys.exit(3)")
    assert (result.reason, result.exit_code, result.output) == (ERROR, 3, "[exit code 3]")


def test_an_endless_loop_times_out_and_leaves_no_process():
    code = ("import os, subprocess, sys\n"
            "child = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
            "print(os.getpid(), child.pid, flush=True)\n"
            "while True:\n    pass\n")
    started = time.monotonic()
    result = run_python(code, timeout_s=1)
    assert time.monotonic() - started < 1 + 2
    assert (result.ok, result.reason) == (False, TIMEOUT)
    assert result.output.endswith("[timed out after 1 s]")
    pid, grandchild = (int(n) for n in result.output.split()[:2])
    assert _gone(pid) and _gone(grandchild)


def test_a_process_left_running_neither_holds_the_result_back_nor_survives():
    code = "import subprocess\nprint(subprocess.Popen(['sleep', '30']).pid)"
    started = time.monotonic()
    result = run_python(code, timeout_s=5)
    assert result.ok and time.monotonic() - started < 2
    assert _gone(int(result.output))


def test_a_big_allocation_ends_as_memory():
    result = run_python("data = bytearray(2 * 1024**3)\nprint('allocated')", memory_mb=256)
    assert (result.ok, result.reason) == (False, MEMORY) and "allocated" not in result.output
    assert "MemoryError" in result.output and result.output.endswith("[out of memory: the limit is 256 MB]")


def test_a_flood_of_output_is_cut_to_the_cap_and_stopped():
    started = time.monotonic()
    result = run_python("print('x' * 10_000_000)\nprint('never')", max_output_chars=1000)
    assert time.monotonic() - started < 5
    assert result.reason == OUTPUT and "never" not in result.output
    assert result.output.count("x") == 1000
    assert "characters cut]" in result.output and "printed more than 1000 characters" in result.output


def test_long_output_keeps_its_start_and_end_and_says_how_much_was_cut():
    result = run_python("for i in range(1000):\n    print(f'line {i:04d}')", max_output_chars=2000)
    assert result.ok and result.output.startswith("line 0000") and result.output.rstrip().endswith("line 0999")
    assert f"[{10 * 1000 - 2000} characters cut]" in result.output


def test_the_network_is_refused_with_the_sandbox_message():
    result = run_python("import socket\nsocket.create_connection(('1.1.1.1', 80))", timeout_s=5)
    assert result.reason == ERROR
    assert result.output.rstrip().splitlines()[-1] == f"PermissionError: {NETWORK_DISABLED}"
    bind = run_python("import socket\nsocket.socket().bind(('127.0.0.1', 0))", timeout_s=5)
    assert bind.output.rstrip().endswith(NETWORK_DISABLED)


def test_the_child_sees_none_of_the_drivers_environment_and_its_folder_is_removed(monkeypatch):
    monkeypatch.setenv("SANDBOX_TEST_SECRET", "hunter2")
    result = run_python("import os, sys\nopen('scratch.txt', 'w').write('x')\n"
                        "print(os.getcwd())\nprint(sorted(os.environ))\nprint(sys.flags.isolated, sys.flags.no_site)")
    folder, names, flags = result.output.splitlines()
    assert result.ok and "hunter2" not in result.output and "SANDBOX_TEST_SECRET" not in names
    assert flags == "1 1"
    assert Path(folder).name.startswith("launcher-sandbox-") and not Path(folder).exists()


def test_the_folder_is_removed_after_a_timeout_too():
    result = run_python("import os\nprint(os.getcwd(), flush=True)\nwhile True: pass", timeout_s=1)
    assert result.reason == TIMEOUT and not Path(result.output.splitlines()[0]).exists()


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="positive"):
        run_python("print(1)", timeout_s=0)
