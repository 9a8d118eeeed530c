"""The custom reward as the run's start loads it: data.reward_fn's module imported and its
function checked against verl's keywords (rl/reward_fn.py load_reward_fn), in a child
process. The run imports it on the driver before Ray starts, so an import that raises is
knowable here; the child keeps the user's import-time code (torch, side effects, a hang)
out of validate's own process, and PROBE_TIMEOUT_S bounds it."""
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from launcher.validate.registry import error, rule, warning
from launcher.validate.rules.data import reward_fn_spec

PROBE_TIMEOUT_S = 60.0
_MARK = "LAUNCHER-probe:"
"""Starts the child's answer line: the user's module may print on import too."""


def probe_code(module: str, loader: str, error_type: str) -> str:
    """A child's program that runs `module.loader(sys.argv[1])` and prints its `error_type` after _MARK."""
    return (f"import json, sys\nfrom {module} import {error_type}, {loader}\n"
            f"try:\n    {loader}(sys.argv[1])\nexcept {error_type} as err:\n"
            f"    print('\\n{_MARK}' + json.dumps(str(err)))\n")


REWARD_PROBE = probe_code("launcher.rl.reward_fn", "load_reward_fn", "RewardFnError")


@functools.lru_cache(maxsize=16)
def probe(code: str, key: str, spec: str, file: Path, mtime: float, cwd: str,
          pythonpath: str | None) -> tuple[str, str] | None:
    """("error" | "warning", message) of loading `spec` with `code` (probe_code) in a child process,
    None when it loads; cached per module file version and search path (sweeps check every point)."""
    try:
        done = subprocess.run([sys.executable, "-c", code, spec], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, cwd=cwd)
    except subprocess.TimeoutExpired:
        return "warning", (f"{key}={spec!r}: importing {file} did not finish within {PROBE_TIMEOUT_S:.0f} s, "
                           "so it is not checked")
    answers = [line.removeprefix(_MARK) for line in done.stdout.splitlines() if line.startswith(_MARK)]
    if answers:
        return "error", json.loads(answers[-1])
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return "error", f"{key}={spec!r}: importing {file} ended the process ({last})"
    return None


@rule("DATA010")
def reward_fn_loads(cfg, plan):
    """data.reward_fn's module imports and its function takes verl's keywords (data_source,
    solution_str, ground_truth, extra_info); checked once DATA003 found the module's file."""
    target = reward_fn_spec(cfg)
    if target is None or target.file is None:
        return  # no custom reward, or DATA003's finding
    spec, module, function, file = target
    found = probe(REWARD_PROBE, "data.reward_fn", spec, file, file.stat().st_mtime, os.getcwd(),
                  os.environ.get("PYTHONPATH"))
    if found is None:
        return
    severity, message = found
    if severity == "warning":
        yield warning("data.reward_fn", message, "The run imports the module when it starts, before Ray; a slow "
                      "import only delays it, a hanging one would stop it there.",
                      f"Check that `python -c 'import {module}'` finishes from this folder.")
        return
    yield error("data.reward_fn", message,
                "The run imports the module on the driver when it starts and calls the function with those keywords "
                "for every response: it would stop before Ray starts, or score every response 0.",
                f"Fix {file} so that `python -c 'from {module} import {function}'` works from this folder (the "
                f"current folder and PYTHONPATH are the path), and give {function} the parameters data_source, "
                "solution_str, ground_truth, extra_info (or **kwargs).")
