"""`export` checks the free space for what it will write before it writes anything (or starts Ray)."""
import shutil
from collections import namedtuple

import pytest
import yaml

from launcher.driver import export as export_module
from launcher.driver.checkpoint_run import CheckpointRunError
from launcher.driver.export import export

SLICE = ["recipe=tiny_grpo_chat", "model=glm5_3_flash_4layer", "cluster=h200x1", "inference.engines=1",
         "trainer.backend=megatron", "model.dtype=bfloat16", "trainer.lora.rank=16", "trainer.lora.alpha=32",
         "trainer.lora.targets=[linear_proj,linear_fc1,linear_fc2,q_proj,k_proj,v_proj,o_proj]"]
Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def checkpoint(tmp_path):
    (tmp_path / "overrides.yaml").write_text(yaml.safe_dump({"overrides": SLICE}))
    step = tmp_path / "checkpoints" / "step_000002"
    (step / "trainer").mkdir(parents=True)
    (step / "COMPLETE").write_text("")
    return step


def _free_gib(monkeypatch, gib: float) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(0, 0, int(gib * 2**30)))
    monkeypatch.setattr(export_module, "_export_on_ray", lambda *a: pytest.fail("started the export"))


def test_a_merged_export_larger_than_the_disk_is_refused_before_writing(checkpoint, tmp_path, monkeypatch):
    _free_gib(monkeypatch, 20)
    with pytest.raises(CheckpointRunError) as err:
        export(str(checkpoint), str(tmp_path / "out"), False, [])
    message = str(err.value)
    assert "the merged model needs 4" in message and "20.0 GiB free" in message and "--adapter" in message
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.partial").exists()


def test_the_adapter_fits_where_the_merged_model_does_not(checkpoint, tmp_path, monkeypatch):
    _free_gib(monkeypatch, 20)
    with pytest.raises(pytest.fail.Exception, match="started the export"):
        export(str(checkpoint), str(tmp_path / "out"), True, [])
