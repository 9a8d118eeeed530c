"""The hf engine's sync manifest: a weight update that misses, repeats, misnames or misshapes
a checkpoint tensor fails finish_weight_update, naming a few; a complete one passes."""
import pytest
import torch

from launcher.contract.spec import ActorSpec
from launcher.weight_sync.manifest import SyncManifest
from launcher.weight_sync.messages import WeightBucket, WeightUpdate
from launcher.workers import engine_class, trainer_class
from launcher.workers.hf.model import checkpoint_state
from tests.shared_compose import compose_shipped


@pytest.fixture(scope="module")
def pair():
    cfg = compose_shipped(["recipe=tiny_grpo", "algorithm.max_response_len=3"]).config
    trainer = trainer_class("hf")(ActorSpec.planned(cfg, 0, 1))
    return cfg, list(checkpoint_state(trainer.model).items())


def _sync(cfg, tensors, version=1):
    engine = engine_class("hf")(ActorSpec.planned(cfg, 0))
    engine.begin_weight_update(WeightUpdate(version))
    engine.load_weight_bucket(WeightBucket("weights", tensors, sum(t.numel() * t.element_size() for _, t in tensors)))
    engine.finish_weight_update(version)
    return engine


def test_a_complete_update_passes(pair):
    cfg, tensors = pair
    assert _sync(cfg, tensors).version == 1


def test_a_missing_tensor_fails_the_update_and_names_it(pair):
    cfg, tensors = pair
    with pytest.raises(ValueError, match=r"1 missing \(e\.g\. \['" + tensors[3][0].replace(".", r"\.")):
        _sync(cfg, tensors[:3] + tensors[4:])


def test_an_unexpected_name_fails_the_update_and_names_it(pair):
    cfg, tensors = pair
    with pytest.raises(ValueError, match=r"1 unexpected \(e\.g\. \['model\.layers\.0\.bogus\.weight'\]"):
        _sync(cfg, tensors + [("model.layers.0.bogus.weight", torch.zeros(2))])


def test_a_duplicate_fails_the_update_and_names_it(pair):
    cfg, tensors = pair
    with pytest.raises(ValueError, match="1 received more than once.*" + tensors[0][0].replace(".", r"\.")):
        _sync(cfg, tensors + [tensors[0]])


def test_a_wrong_shape_fails_the_update(pair):
    cfg, tensors = pair
    name, t = tensors[1]
    bad = tensors[:1] + [(name, torch.zeros(t.numel() + 1))] + tensors[2:]
    with pytest.raises(ValueError, match=f"wrong shape.*{name}"):
        _sync(cfg, bad)


def test_a_failed_update_leaves_the_next_one_clean(pair):
    cfg, tensors = pair
    engine = engine_class("hf")(ActorSpec.planned(cfg, 0))
    engine.begin_weight_update(WeightUpdate(1))
    engine.load_weight_bucket(WeightBucket("weights", tensors[:2], 0))
    with pytest.raises(ValueError, match="missing"):
        engine.finish_weight_update(1)
    engine.begin_weight_update(WeightUpdate(2))
    engine.load_weight_bucket(WeightBucket("weights", tensors, 0))
    engine.finish_weight_update(2)
    assert engine.version == 2


def test_manifest_rules():
    m = SyncManifest({"a": (2,), "b": None}, who="x")
    assert m.add("a", (2,)) and not m.add("a", (2,)) and not m.add("c")
    problems = m.problems(full=True)
    assert [p.split(" (")[0] for p in problems] == ["1 missing", "1 unexpected", "1 received more than once"]
    assert m.problems(full=False)[0].startswith("1 unexpected")
