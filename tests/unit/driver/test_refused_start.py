"""A start refused before Ray (launcher/driver/launch.py): data.reward_fn, the tokenizer folder
and the data are read first, their errors are one Refused message (exit 1, no traceback),
and a run directory holding only what this start wrote is removed again."""
import pytest

from launcher.driver.launch import RUN_FILES, Refused, _before_ray, _remove_if_fresh
from launcher.driver.records.rundir import LOCK_NAME
from tests.shared_compose import compose_shipped


@pytest.mark.parametrize("overrides, message", [
    (["data.reward_fn=no_such_reward_mod_q7:fn"], "data.reward_fn='no_such_reward_mod_q7:fn': cannot import module"),
    (["model.tokenizer_path=/nonexistent/tok"],
     "the run's tokenizer (model.tokenizer_path=/nonexistent/tok) does not load: OSError"),
    (["data.task=gsm8k", "data.train_path=/nonexistent/train.jsonl"], "/nonexistent/train.jsonl"),
])
def test_what_the_driver_reads_before_ray_is_refused_with_its_message(overrides, message):
    with pytest.raises(Refused, match="^") as err:
        _before_ray(compose_shipped(["recipe=tiny_grpo", *overrides]).config)
    assert message in str(err.value)


def test_a_fresh_run_directory_is_removed(tmp_path):
    for name in (*RUN_FILES, LOCK_NAME):
        (tmp_path / "run" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "run" / name).write_text("{}")
    assert _remove_if_fresh(tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_earlier_runs_directory_is_kept(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "config.yaml").write_text("{}")
    assert not _remove_if_fresh(tmp_path)
    assert (tmp_path / "checkpoints").is_dir() and (tmp_path / "config.yaml").is_file()
