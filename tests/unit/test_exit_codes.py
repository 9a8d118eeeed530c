"""The exit codes are written once (launcher/exit_codes.py) and README's Commands section lists
them all; an unexpected error's last line says it is a bug, not the user's config."""
from pathlib import Path

from launcher.exit_codes import ExitCode, unexpected

ROOT = Path(__file__).resolve().parents[2]


def test_readme_lists_every_exit_code():
    line = next(ln for ln in (ROOT / "README.md").read_text().splitlines() if "launcher/exit_codes.py" in ln)
    text = line + (ROOT / "README.md").read_text().split(line, 1)[1].split("\n\n", 1)[0]
    for code in ExitCode:
        assert f"{int(code)} " in text, (code, text)


def test_the_line_after_an_unexpected_traceback_calls_it_a_bug():
    assert unexpected("export") == ("export failed on an unexpected error (traceback above): a bug of the launcher "
                                    "or a backend, not of the config; please report it with the traceback")
