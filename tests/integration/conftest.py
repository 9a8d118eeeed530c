"""The `launch_run` fixture: start launcher subprocesses, kill any left running at the end."""
import pytest
from launch_helpers import Run


@pytest.fixture
def launch_run(tmp_path):
    runs: list[Run] = []

    def start(name: str, overrides: list[str]) -> Run:
        run = Run(tmp_path, name, overrides)
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
