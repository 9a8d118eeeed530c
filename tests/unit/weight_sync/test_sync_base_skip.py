"""Adapter sync from a checkpoint: the first sync ships the adapter alone when the engines
loaded the very checkpoint the trainer adapts (weight_sync.engines_hold_base), and the base
otherwise (random init, another checkpoint, weights dropped by a level-2 sleep).

The real hf trainer and hf engines in this process, from the tiny GLM checkpoint fixture,
driven by weight_sync's own stream; the group methods call them at once (no Ray).
"""
import json
import shutil

import pytest
import torch

from launcher.contract.spec import ActorSpec
from launcher.plan import make_plan
from launcher.plan.sync import SyncTransport
from launcher.weight_sync.push import engines_hold_base, sync_weights
from launcher.workers import engine_class, trainer_class
from launcher.workers.hf import lora
from launcher.workers.hf.names import VISION_PREFIX
from tests.shared_compose import compose_shipped

ADAPTER = ["recipe=tiny_grpo", "trainer.lora.rank=4", "trainer.lora.alpha=8",
           "trainer.lora.targets=[linear_proj,q_proj,linear_fc1]", "trainer.lora.merge=false"]
BOUND = 160 << 10


class _InProcess:
    """TrainerGroup (one rank) and EngineGroup methods over backends in this process."""

    transport = SyncTransport.host

    def __init__(self, members: list):
        self.members = members

    def call(self, method: str, *args) -> list:
        return [getattr(m, method)(*args) for m in self.members]

    def begin_weight_update(self, update):
        return self.call("begin_weight_update", update)

    def load_weight_bucket(self, bucket):
        return self.call("load_weight_bucket", bucket)

    def finish_weight_update(self, version):
        return self.call("finish_weight_update", version)

    def wait(self, results, what):
        return results

    def begin_export(self, *args):
        return self.members[0].begin_export(*args)

    def next_bucket(self):
        return self.members[0].next_bucket()

    def release_export(self):
        self.members[0].release_export()


def _config(hf_path, *extra):
    return compose_shipped([f"model.hf_path={hf_path}", *ADAPTER, *extra]).config


def _hold_base(engines, cfg) -> bool:
    """engines_hold_base as Runtime.sync_weights asks it: with the plan's sync kind."""
    return engines_hold_base(engines, make_plan(cfg).sync.kind, cfg.model.hf_path)


def _first_sync(cfg, trainer, engine):
    """What Runtime.sync_weights does for the run's first push (with_base=True asked)."""
    engines = _InProcess([engine])
    with_base = not _hold_base(engines, cfg)
    return with_base, sync_weights(_InProcess([trainer]), engines, 1, with_base, wait=True, max_bucket_bytes=BOUND)


@pytest.mark.slow
def test_first_sync_skips_the_base_the_engines_loaded(tiny_glm_checkpoint):
    cfg = _config(tiny_glm_checkpoint)
    trainer = trainer_class("hf")(ActorSpec.planned(cfg, 0, 1))
    with torch.no_grad():  # a nonzero adapter, so serving it shows
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5)
    skipped, pushed = engine_class("hf")(ActorSpec.planned(cfg, 0)), engine_class("hf")(ActorSpec.planned(cfg, 1))
    with_base, stats = _first_sync(cfg, trainer, skipped)
    assert not with_base
    full = sync_weights(_InProcess([trainer]), _InProcess([pushed]), 1, True, wait=True, max_bucket_bytes=BOUND)
    # The adapter as it ships: per checkpoint module, so a routed expert's fused gate|up A goes twice (gate, up).
    adapter_bytes = sum(t.numel() * t.element_size() for _, t in lora.checkpoint_adapter(trainer.model))
    print(f"first sync: {stats.nbytes} B without the base, {full.nbytes} B with it")
    base = lora.merged_items(trainer.model, VISION_PREFIX, with_delta=False)
    assert stats.nbytes == adapter_bytes and full.nbytes == adapter_bytes + sum(t.nbytes for _, t in base)
    served, reference = skipped.model.state_dict(), pushed.model.state_dict()  # base + adapter
    assert served.keys() == reference.keys() and any("lora_B" in n for n in served)
    assert all(torch.equal(t, reference[n]) for n, t in served.items()) and skipped.version == 1


@pytest.mark.slow
def test_the_base_is_sent_when_the_engines_lack_it(tiny_glm_checkpoint, tmp_path):
    cfg = _config(tiny_glm_checkpoint)
    engine = engine_class("hf")(ActorSpec.planned(cfg, 0))
    assert _hold_base(_InProcess([engine]), cfg)
    other = shutil.copytree(tiny_glm_checkpoint, tmp_path / "other")
    index = json.loads((other / "model.safetensors.index.json").read_text())
    index["metadata"] = {**index.get("metadata", {}), "note": "another base"}
    (other / "model.safetensors.index.json").write_text(json.dumps(index))
    assert not _hold_base(_InProcess([engine]), _config(other))  # same path layout, other sha256
    random_init = compose_shipped(ADAPTER).config
    assert not _hold_base(_InProcess([engine_class("hf")(ActorSpec.planned(random_init, 0))]), random_init)
    engine.sleep(2)  # dropped its weights
    assert not _hold_base(_InProcess([engine]), cfg)


def test_merged_syncs_never_ask(tiny_glm_checkpoint):
    class NoEngines:
        def call(self, method):
            raise AssertionError("a merged sync has no separate base to skip")

    assert not _hold_base(NoEngines(), _config(tiny_glm_checkpoint, "trainer.lora.merge=true"))
