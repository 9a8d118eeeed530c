"""Damaged, unfinished and unwritable checkpoints, without Ray: the real hf trainer behind an
in-process stand-in for the TrainerGroup.

A damaged file fails its load naming the file; run.resume=auto falls back to the checkpoint
before and says which one it skipped and why; a torn last metrics line is dropped; a save
that does not fit fails before writing, and a failed save leaves no `.partial` behind.
"""
import gc
import json
import os
import random
import shutil
import subprocess
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from launcher.contract.spec import ActorSpec
from launcher.driver.actors.session import restore
from launcher.driver.records import checkpoint as ck
from launcher.driver.records.checkpoint import (
    Checkpointer,
    CheckpointError,
    DamagedCheckpointError,
    DriverState,
    ResumeError,
    load_driver_state,
    resolve_resume,
)
from tests.shared_compose import compose_shipped

CONFIG = ["recipe=tiny_grpo", "trainer.backend=hf"]


class InProcess:
    """TrainerGroup.call over trainer objects in this process."""

    def __init__(self, *ranks):
        self.ranks = ranks

    def call(self, method: str, *args) -> list:
        return [getattr(rank, method)(*args) for rank in self.ranks]


@pytest.fixture(scope="module")
def hf():
    from launcher.workers import trainer_class

    return InProcess(trainer_class("hf")(ActorSpec.planned(compose_shipped(CONFIG).config, 0, 1)))


def _saved(root: Path, group, steps=(2, 4)) -> Checkpointer:
    ckpt = Checkpointer(root, every_steps=2, keep=5, total_steps=10)
    for step in steps:
        ckpt.save(group, DriverState(step=step, policy_version=step, data_position=4 * step))
    return ckpt


def _truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def _scramble(file: Path) -> None:
    """Same size, not a checkpoint any more: only the trainer's load can tell."""
    file.write_bytes(b"\0" * file.stat().st_size)


def test_truncated_model_file_fails_the_load_naming_it(tmp_path, hf):
    _saved(tmp_path, hf, steps=(2,))
    model = tmp_path / "step_000002" / "trainer" / "model.pt"
    _truncate(model)
    with pytest.raises(DamagedCheckpointError, match=rf"^{model} does not match the size and crc32"):
        hf.call("load_checkpoint", str(model.parent))
    shutil.rmtree(model.parent / "integrity")  # a checkpoint from before the record: torch.load's error, named
    with pytest.raises(DamagedCheckpointError, match=rf"{model} is damaged or unreadable \(RuntimeError: ") as err:
        hf.call("load_checkpoint", str(model.parent))
    assert len(str(err.value).splitlines()) == 1


def test_empty_driver_file_fails_naming_it(tmp_path):
    (tmp_path / "driver.json").write_text("")
    with pytest.raises(DamagedCheckpointError, match=rf"{tmp_path / 'driver.json'} is damaged .*it is empty"):
        load_driver_state(tmp_path)


def test_auto_resume_skips_a_short_file_and_says_so(tmp_path, hf, capsys):
    ckpt = _saved(tmp_path, hf)
    model = tmp_path / "step_000004" / "trainer" / "model.pt"
    written = model.stat().st_size
    _truncate(model)
    assert resolve_resume("auto", ckpt) == tmp_path / "step_000002"
    err = capsys.readouterr().err
    assert f"skipping {tmp_path / 'step_000004'}: {model} is {written // 2} bytes, {written} were written" in err


def test_auto_resume_skips_an_unreadable_driver_file(tmp_path, hf, capsys):
    ckpt = _saved(tmp_path, hf)
    (tmp_path / "step_000004" / "driver.json").write_text('{"step": 4, "poli')
    assert resolve_resume("auto", ckpt) == tmp_path / "step_000002"
    assert "step_000004/driver.json is damaged or unreadable (JSONDecodeError" in capsys.readouterr().err


def test_explicit_resume_of_a_damaged_checkpoint_names_the_file(tmp_path, hf):
    _saved(tmp_path, hf, steps=(2,))
    missing = tmp_path / "step_000002" / "trainer" / "optimizer.pt"
    missing.unlink()
    ckpt = Checkpointer(tmp_path, 2, 5, 10)
    with pytest.raises(ResumeError, match=rf"run.resume=.* is damaged: {missing} is missing"):
        resolve_resume(str(tmp_path / "step_000002"), ckpt)


def test_every_checkpoint_damaged_is_an_error_not_a_fresh_start(tmp_path, hf):
    ckpt = _saved(tmp_path, hf)
    for step in (2, 4):
        _truncate(tmp_path / f"step_00000{step}" / "trainer" / "model.pt")
    with pytest.raises(ResumeError, match="every checkpoint in .* is damaged"):
        resolve_resume("auto", ckpt)


def test_a_load_that_raises_falls_back_to_the_previous_checkpoint(tmp_path, hf, capsys):
    from launcher.workers.hf.model import language_state

    trainer = hf.ranks[0]
    ckpt = _saved(tmp_path, hf, steps=(2,))
    at_2 = language_state(trainer.model)
    with torch.no_grad():
        for param in trainer.params:
            param.add_(1.0)
    _saved(tmp_path, hf, steps=(4,))
    _scramble(tmp_path / "step_000004" / "trainer" / "model.pt")
    newest = resolve_resume("auto", ckpt)
    assert newest == tmp_path / "step_000004"  # sizes are right: the driver cannot tell
    assert restore(hf, ckpt, newest, fallback=True) == tmp_path / "step_000002"
    err = capsys.readouterr().err
    assert f"skipping {newest}: a trainer rank could not load it (DamagedCheckpointError: {newest}/trainer/model.pt" in err
    assert f"resuming from {tmp_path / 'step_000002'} instead" in err
    assert all(torch.equal(v, at_2[k]) for k, v in language_state(trainer.model).items())
    with pytest.raises(ResumeError, match=rf"checkpoint {newest} could not be loaded: DamagedCheckpointError: {newest}"):
        restore(hf, ckpt, newest, fallback=False)


def test_rng_state_survives_a_weights_only_load(tmp_path, hf):
    random.seed(7)
    torch.manual_seed(7)
    hf.call("save_checkpoint", str(tmp_path))
    expected = (random.random(), torch.rand(3))
    random.seed(8)
    torch.manual_seed(8)
    hf.call("load_checkpoint", str(tmp_path))
    again = (random.random(), torch.rand(3))
    assert again[0] == expected[0] and torch.equal(again[1], expected[1])


def test_torn_last_metrics_line_is_dropped_with_a_message(tmp_path, capsys):
    from launcher.driver.records.metrics import METRICS_FILE, StepLogger

    rows = [json.dumps({"step": s, "reward": 0.5}) for s in (1, 2, 3)]
    (tmp_path / METRICS_FILE).write_text("\n".join(rows) + '\n{"step": 4, "rew')
    cfg = compose_shipped(CONFIG).config
    StepLogger(tmp_path, cfg.logging, cfg.run, start_step=3, config_dict={})
    assert (tmp_path / METRICS_FILE).read_text() == "".join(r + "\n" for r in rows)
    assert f"{tmp_path / METRICS_FILE}: dropped line 4, cut short or damaged" in capsys.readouterr().err
    StepLogger(tmp_path, cfg.logging, cfg.run, start_step=2, config_dict={})  # and the next resume works too
    assert (tmp_path / METRICS_FILE).read_text() == "".join(r + "\n" for r in rows[:2])


# ----------------------------------------------------------------------------- writing


class Writes:
    """A trainer group whose ranks torch.save `n_bytes` of tensor (then raise, with `fail`)."""

    def __init__(self, n_bytes: int, fail: BaseException | None = None):
        self.n_bytes, self.fail = n_bytes, fail

    def call(self, method: str, *args) -> list:
        if method == "finalize_checkpoint":
            return [0.0]
        assert method == "save_checkpoint"
        path = args[0]
        os.makedirs(path)
        torch.save({"w": torch.zeros(self.n_bytes // 4, dtype=torch.float32)}, os.path.join(path, "model.pt"))
        if self.fail is not None:
            raise self.fail
        return [None]


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def test_save_without_room_for_another_checkpoint_fails_before_writing(tmp_path, monkeypatch):
    ckpt = _saved(tmp_path, Writes(2**20), steps=(2,))
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(ck.shutil, "disk_usage", lambda _: usage(100 * 2**30, 99 * 2**30, 2**19))
    with pytest.raises(CheckpointError, match=rf"^no space left on {tmp_path}: need 0.001\d+ GiB, have 0.000488 GiB"):
        ckpt.save(Writes(2**20, fail=AssertionError("must not be called")), DriverState(step=4))
    assert _leftovers(tmp_path) == [] and [p.name for p in ckpt.complete()] == ["step_000002"]


def test_a_failed_save_removes_its_partial_folder_and_keeps_the_old_checkpoints(tmp_path):
    ckpt = _saved(tmp_path, Writes(1024), steps=(2,))
    with pytest.raises(OSError, match="rank 1 fell over"):
        ckpt.save(Writes(1024, fail=OSError("rank 1 fell over")), DriverState(step=4))
    assert _leftovers(tmp_path) == [] and [p.name for p in ckpt.complete()] == ["step_000002"]
    assert ck.damage(tmp_path / "step_000002") is None


def test_an_interrupted_write_of_an_earlier_run_is_removed_at_start(tmp_path, capsys):
    unfinished = tmp_path / ".step_000006.partial"
    (unfinished / "trainer").mkdir(parents=True)
    (unfinished / "trainer" / "model.pt").write_bytes(b"half")
    Checkpointer(tmp_path, 2, 5, 10)
    assert not unfinished.exists()
    assert f"removed {unfinished}: a checkpoint write that an earlier run did not finish" in capsys.readouterr().err


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 3 MiB filesystem (tmpfs; mounting one needs root)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a 3 MiB tmpfs needs root")
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)]).returncode != 0:
        pytest.skip("mount -t tmpfs was refused")
    yield mount_point
    subprocess.run(["umount", "--lazy", str(mount_point)], check=True)  # lazy: a failed write's file may still be open


@pytest.mark.slow
def test_a_full_disk_fails_the_save_cleanly(tiny_disk):
    ckpt = Checkpointer(tiny_disk, 2, 1, 10)
    # No checkpoint to size the first one by: the write itself fails (torch: "enforce fail at inline_container").
    with pytest.raises(CheckpointError, match=rf"no space left on {tiny_disk} while writing step_000002 .*inline_container"):
        ckpt.save(Writes(4 * 2**20), DriverState(step=2))
    gc.collect()  # the failed write's file stays open (so its space in use) while its traceback lives
    assert _leftovers(tiny_disk) == [] and ckpt.complete() == []
    ckpt.save(Writes(2**20), DriverState(step=2))
    with pytest.raises(CheckpointError, match=rf"no space left on {tiny_disk} while writing step_000004"):
        ckpt.save(Writes(int(2.5 * 2**20)), DriverState(step=4))  # passes the size check, then grows past it
    gc.collect()
    assert _leftovers(tiny_disk) == [] and ck.damage(tiny_disk / "step_000002") is None
    ckpt.save(Writes(2**20), DriverState(step=4))  # keep=1: step 2 goes only once step 4 is complete
    ckpt.save(Writes(2**20), DriverState(step=6))
    assert [p.name for p in ckpt.complete()] == ["step_000006"]
    Writes(int(1.5 * 2**20)).call("save_checkpoint", str(tiny_disk / "filler"))  # someone else's files
    with pytest.raises(CheckpointError, match=rf"^no space left on {tiny_disk}: need 0.00\d+ GiB, have 0.000\d+ GiB"):
        ckpt.save(Writes(2**20), DriverState(step=8))
    assert [p.name for p in ckpt.complete()] == ["step_000006"] and _leftovers(tiny_disk) == []


# ----------------------------------------------------------------------------- integrity record


def _flip_middle_byte(file: Path) -> None:
    """One bit pattern changed inside the tensor data: same size, still a valid zip and pickle."""
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))


def test_a_flipped_byte_is_refused_at_resume_naming_the_file(tmp_path, hf, capsys):
    ckpt = _saved(tmp_path, hf)
    newest = tmp_path / "step_000004"
    model = newest / "trainer" / "model.pt"
    _flip_middle_byte(model)
    torch.load(model, weights_only=True)  # torch's own reader takes the damage: only the record can tell
    assert resolve_resume("auto", ckpt) == newest  # the size is right: the driver's files.json cannot tell either
    with pytest.raises(ResumeError, match=rf"checkpoint {newest} could not be loaded: DamagedCheckpointError: "
                                          rf"{model} does not match the size and crc32 its writer recorded"):
        restore(hf, ckpt, newest, fallback=False)
    assert restore(hf, ckpt, newest, fallback=True) == tmp_path / "step_000002"
    assert f"skipping {newest}: a trainer rank could not load it (DamagedCheckpointError: {model}" in capsys.readouterr().err


def test_each_rank_records_what_it_wrote(tmp_path, hf):
    hf.call("save_checkpoint", str(tmp_path))
    record = json.loads((tmp_path / "integrity" / "rank0.json").read_text())
    assert sorted(record) == ["model.pt", "optimizer.pt", "rng_rank0.pt"]
    assert record["model.pt"]["bytes"] == (tmp_path / "model.pt").stat().st_size


def test_a_missing_record_of_a_recorded_checkpoint_is_damage(tmp_path, hf):
    hf.call("save_checkpoint", str(tmp_path))
    record = tmp_path / "integrity" / "rank0.json"
    record.write_text("{")
    with pytest.raises(DamagedCheckpointError, match=rf"^{record} is missing or damaged \(JSONDecodeError\)"):
        hf.call("load_checkpoint", str(tmp_path))


def test_a_checkpoint_from_before_the_record_loads_with_a_note(tmp_path, hf):
    hf.call("save_checkpoint", str(tmp_path))
    shutil.rmtree(tmp_path / "integrity")
    assert hf.call("load_checkpoint", str(tmp_path)) == [f"{tmp_path}: no integrity record (written before it "
                                                         "existed): its files are not checked"]
