"""`launcher validate` (pre-commit runs it on every commit) imports none of the run's stack.

One fresh interpreter imports the entry point, then refuses a recipe through main(), watching
every import: a module below that gets imported on the way fails the test with the launcher line
that imported it. Timing is benchmarks/validate_speed.py's job; this guards the cut without it.
"""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
NEVER = ("torch", "ray", "vllm", "megatron", "transformers", "launcher.driver")
"""The RL stack, and the run directory's code (validate writes nothing)."""
NOT_AT_IMPORT = NEVER + ("numpy", "pyarrow", "tokenizers", "jinja2", "launcher.cli.commands", "launcher.cli.help")
"""Before any work: also what only the data pre-flight (reading a data file) and the other commands need."""
REFUSED = ["validate", "recipe=tiny_grpo", "trainer.mesh.sequence_parallel=true"]  # MESH008

PROBE = """import contextlib, io, json, sys, traceback
watched, argv, first = json.loads(sys.argv[1]), json.loads(sys.argv[2]), {}


class Watch:
    def find_spec(self, name, path=None, target=None):
        if name not in first and any(name == w or name.startswith(w + '.') for w in watched):
            here = [f'{f.filename}:{f.lineno}' for f in traceback.extract_stack() if '/launcher/' in f.filename]
            first[name] = here[-1] if here else 'outside launcher/'


sys.meta_path.insert(0, Watch())
import launcher.__main__ as entry
at_import = dict(first)
with contextlib.redirect_stdout(io.StringIO()):
    code = entry.main(argv)
print(json.dumps({'code': code, 'at_import': at_import, 'after_run': first}))
"""


def _offenders(found: dict[str, str], forbidden: tuple[str, ...]) -> list[str]:
    return [f"{name} (imported at {where})" for name, where in sorted(found.items())
            if any(name == f or name.startswith(f + ".") for f in forbidden)]


def test_validate_imports_no_run_stack():
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(NOT_AT_IMPORT), json.dumps(REFUSED)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["code"] == 1, f"the MESH008 recipe was not refused: {result}"
    at_import = _offenders(result["at_import"], NOT_AT_IMPORT)
    assert not at_import, ("importing launcher.__main__ loads what validate does not need: " + "; ".join(at_import)
                           + ". Import it inside the function (or command branch) that uses it.")
    after_run = _offenders(result["after_run"], NEVER)
    assert not after_run, ("`launcher validate` loads the run's stack: " + "; ".join(after_run)
                           + ". Pre-commit pays for it on every commit: import it where the run needs it.")
