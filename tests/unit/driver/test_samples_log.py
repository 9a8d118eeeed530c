"""samples.jsonl on resume: the rows of steps past the checkpoint go, as metrics.jsonl's do."""
import json
from types import SimpleNamespace

from launcher.driver.records.samples_log import SAMPLES_FILE, forget_after, write_samples


def _group(step: int) -> SimpleNamespace:
    return SimpleNamespace(prompt_ids=[1, 2], responses=[[step, 3], [4]], logprobs=[[-0.1, -0.2], [-0.3]],
                           token_versions=[[step - 1, step - 1], [step - 1]], rewards=[1.0, 0.0])


def _steps(run_dir) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / SAMPLES_FILE).read_text().splitlines()]


def test_a_resume_forgets_the_rows_of_steps_past_its_checkpoint(tmp_path):
    for step in (1, 2, 3, 4):
        write_samples(tmp_path, step, step, [_group(step)])
    with open(tmp_path / SAMPLES_FILE, "a") as out:
        out.write('{"step": 5, "tok')  # a row cut short by a killed run
    forget_after(tmp_path, 2)
    assert _steps(tmp_path) == [1, 1, 2, 2]
    write_samples(tmp_path, 3, 3, [_group(3)])
    assert _steps(tmp_path) == [1, 1, 2, 2, 3, 3]
    forget_after(tmp_path, 0)
    assert (tmp_path / SAMPLES_FILE).read_text() == ""


def test_a_run_without_samples_has_nothing_to_forget(tmp_path):
    forget_after(tmp_path, 3)
    assert not (tmp_path / SAMPLES_FILE).exists()
