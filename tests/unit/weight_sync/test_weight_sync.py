"""Streamed weight sync without Ray: the trainer's export yields bounded buckets, the driver
never holds more than MAX_BUCKETS_ALIVE of them, engines see begin -> buckets -> finish and
refuse to generate in between, and what arrives equals the trainer's weights."""
import weakref

import pytest
import torch

from launcher.contract.messages import GenerationRequest, SamplingParams
from launcher.contract.spec import ActorSpec
from launcher.plan.sync import MAX_BUCKETS_ALIVE, SyncTransport
from launcher.weight_sync.export import buckets
from launcher.weight_sync.messages import WeightUpdate
from launcher.weight_sync.pump import stream_weights, sync_in_process
from launcher.weight_sync.push import check_pending
from launcher.weight_sync.transports.base import nbytes
from launcher.workers import engine_class, trainer_class
from launcher.workers.hf.model import checkpoint_state, language_state
from tests.shared_compose import compose_shipped

BOUND = 160 << 10  # the tiny model is ~1.3 MiB in 112 tensors of <= 128 KiB: ~9 buckets
LORA = ["trainer.lora.rank=4", "trainer.lora.alpha=8", "trainer.lora.targets=[linear_proj,q_proj,linear_fc1]"]


def test_buckets_are_bounded_ordered_complete_and_of_one_kind():
    named = [("weights", f"w{i}", torch.zeros(n)) for i, n in enumerate([10, 10, 5, 5, 30, 1])]  # fp32: 4 B each
    named.append(("adapter", "a0", torch.zeros(1)))
    out = list(buckets(named, max_bytes=80))
    # 40+40 fill one bucket; 20+20 share the next; 120 B exceeds the bound and travels alone;
    # a change of kind starts a new bucket.
    assert [[n for n, _ in b.tensors] for b in out] == [["w0", "w1"], ["w2", "w3"], ["w4"], ["w5"], ["a0"]]
    assert [b.kind for b in out] == ["weights"] * 4 + ["adapter"]
    assert [b.nbytes for b in out] == [80, 40, 120, 4, 4]


def _trainer(*overrides, rank=0):
    cfg = compose_shipped(["recipe=tiny_grpo", "algorithm.max_response_len=3", *overrides]).config
    return cfg, trainer_class("hf")(ActorSpec.planned(cfg, rank, 1))


def _drain(trainer) -> list:
    out = []
    while (step := trainer.next_bucket())[0] is not None:
        out.append(step)
    return out


def test_trainer_export_yields_bounded_buckets_of_its_whole_model():
    cfg, trainer = _trainer()
    update = trainer.begin_export(3, with_base=False, max_bucket_bytes=BOUND)
    assert update == WeightUpdate(3, adapter=None, with_base=False)
    steps = _drain(trainer)
    assert len(steps) > 5
    for info, bucket in steps:
        assert info.nbytes == bucket.nbytes == sum(nbytes(t) for _, t in bucket.tensors)
        assert bucket.nbytes <= BOUND or len(bucket.tensors) == 1
        assert all(t.device.type == "cpu" for _, t in bucket.tensors)
    assert [info.index for info, _ in steps] == list(range(len(steps)))
    received = {name: t for _, bucket in steps for name, t in bucket.tensors}
    expected = checkpoint_state(trainer.model)
    assert list(received) == list(expected)  # every tensor, once, in module (layer) order
    assert all(torch.equal(received[n], expected[n]) for n in expected)
    assert trainer.next_bucket() == (None, None)  # exhausted stays exhausted


def test_other_ranks_take_every_step_but_ship_no_tensors():
    _, rank0 = _trainer()
    _, rank1 = _trainer(rank=1)
    rank0.begin_export(1, False, BOUND)
    rank1.begin_export(1, False, BOUND)
    steps0, steps1 = _drain(rank0), _drain(rank1)
    assert [info for info, _ in steps1] == [info for info, _ in steps0]
    assert all(bucket is None for _, bucket in steps1)


@pytest.mark.slow
def test_adapter_export_sends_the_base_first_then_the_adapter():
    _, trainer = _trainer(*LORA, "trainer.lora.merge=false")
    update = trainer.begin_export(2, with_base=True, max_bucket_bytes=BOUND)
    assert update.adapter is not None and update.with_base
    kinds = [info.kind for info, _ in _drain(trainer)]
    assert kinds[0] == "weights" and kinds[-1] == "adapter" and kinds == sorted(kinds, key=["weights", "adapter"].index)
    trainer.begin_export(3, with_base=False, max_bucket_bytes=BOUND)
    assert {info.kind for info, _ in _drain(trainer)} == {"adapter"}


class _Ref:
    """Stands for a Ray ObjectRef: the bucket lives as long as some reference to it does."""

    def __init__(self, bucket, live: weakref.WeakSet):
        self.bucket = bucket
        live.add(self)


class _Trainers:
    """TrainerGroup's export methods over one in-process rank, counting live buckets."""

    transport = SyncTransport.host  # engines in this process: host buckets

    def __init__(self, trainer):
        self.trainer, self.live, self.peak = trainer, weakref.WeakSet(), 0

    def begin_export(self, version, with_base, max_bucket_bytes, transport):
        return self.trainer.begin_export(version, with_base, max_bucket_bytes, transport)

    def release_export(self):
        self.trainer.release_export()

    def next_bucket(self):
        self.peak = max(self.peak, len(self.live) + 1)  # those still referenced + the one built now
        info, bucket = self.trainer.next_bucket()
        return info, (_Ref(bucket, self.live) if info is not None else None)


class _Engines:
    """EngineGroup's update methods over in-process engines. Calls queue up and run, in
    order, only when waited for, as on an engine busy generating (the worst case for how
    long buckets stay alive); a call drops its argument once it has run, as Ray does."""

    def __init__(self, engines):
        self.engines, self.queue, self.log = engines, [], []

    def _submit(self, method, arg) -> list:
        calls = [{"engine": e, "method": method, "arg": arg, "done": False} for e in self.engines]
        self.queue += calls
        return calls

    def begin_weight_update(self, update):
        return self._submit("begin_weight_update", update)

    def load_weight_bucket(self, ref):
        return self._submit("load_weight_bucket", ref)

    def finish_weight_update(self, version):
        return self._submit("finish_weight_update", version)

    def wait(self, calls, what):
        while any(not c["done"] for c in calls):
            call = self.queue.pop(0)
            arg = call.pop("arg")
            getattr(call["engine"], call["method"])(arg.bucket if isinstance(arg, _Ref) else arg)
            self.log.append((self.engines.index(call["engine"]), call["method"]))
            call["done"] = True
        return [None] * len(calls)


@pytest.mark.parametrize("max_alive", [1, MAX_BUCKETS_ALIVE])
def test_driver_holds_at_most_max_alive_buckets_and_engines_get_whole_versions(max_alive):
    cfg, trainer = _trainer()
    engines = [engine_class("hf")(ActorSpec.planned(cfg, i)) for i in range(2)]
    trainers, group = _Trainers(trainer), _Engines(engines)
    stats = stream_weights(trainers, group, 7, with_base=False, wait=True, max_bucket_bytes=BOUND,
                           max_alive=max_alive)
    assert stats.buckets > 5 and stats.max_bucket_bytes <= BOUND
    assert trainers.peak == max_alive  # bounded, and the bound is used (bucket i+1 built while i loads)
    assert len(trainers.live) == 0 and group.queue == []
    for index in range(2):  # per engine: begin, every bucket, finish; nothing else in between
        calls = [m for e, m in group.log if e == index]
        assert calls == ["begin_weight_update"] + ["load_weight_bucket"] * stats.buckets + ["finish_weight_update"]
    expected = language_state(trainer.model)
    for engine in engines:
        assert engine.version == 7
        assert all(torch.equal(engine.model.state_dict()[n], t) for n, t in expected.items())


def test_async_sync_returns_with_the_tail_queued_and_checks_it_later():
    cfg, trainer = _trainer()
    trainers, group = _Trainers(trainer), _Engines([engine_class("hf")(ActorSpec.planned(cfg, 0))])
    stats = stream_weights(trainers, group, 1, with_base=False, wait=False, max_bucket_bytes=BOUND)
    assert trainers.peak <= MAX_BUCKETS_ALIVE
    assert group.queue  # the last bucket's load and the finish wait behind the engine's chunks
    assert group.engines[0].version == 0
    check_pending(group, stats.pending)
    assert group.queue == [] and group.engines[0].version == 1 and len(trainers.live) == 0


class _RayEngines(_Engines):
    """As Ray does: a call that raised keeps its error for whoever waits on it; the calls queued
    behind it still run."""

    def wait(self, calls, what):
        while any(not c["done"] for c in calls):
            call = self.queue.pop(0)
            arg = call.pop("arg")
            try:
                getattr(call["engine"], call["method"])(arg.bucket if isinstance(arg, _Ref) else arg)
            except RuntimeError as err:
                call["error"] = err
            call["done"] = True
        for call in calls:
            if "error" in call:
                raise call["error"]
        return [None] * len(calls)


def test_an_engine_whose_update_never_began_reports_why_not_its_loads_refusal():
    cfg, trainer = _trainer()
    engine = engine_class("hf")(ActorSpec.planned(cfg, 0))

    def no_room():
        raise RuntimeError("CUDA out of memory while materializing the engine's weights")

    engine._begin_weights = no_room
    with pytest.raises(RuntimeError, match="out of memory"):
        stream_weights(_Trainers(trainer), _RayEngines([engine]), 1, with_base=True, wait=True,
                       max_bucket_bytes=BOUND, max_alive=1)


@pytest.mark.slow
def test_engine_refuses_to_generate_in_the_middle_of_an_update():
    cfg, trainer = _trainer()
    engine = engine_class("hf")(ActorSpec.planned(cfg, 0))
    sync_in_process(trainer, [engine], 0, with_base=True)  # it starts empty: the first sync fills it
    request = GenerationRequest([[5, 6, 7]], 1, SamplingParams(max_tokens=2))
    engine.begin_weight_update(WeightUpdate(1))
    with pytest.raises(RuntimeError, match="middle of weight update 1"):
        engine.generate(request)
    engine.finish_weight_update(1)
    assert engine.generate(request).policy_version == 1


def test_merged_lora_sync_in_small_buckets_reproduces_the_trainers_model():
    cfg, trainer = _trainer(*LORA, "trainer.lora.merge=true", "trainer.lora.rank=4")
    with torch.no_grad():  # a nonzero delta, so merging shows
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.normal_()
    engine = engine_class("hf")(ActorSpec.planned(cfg, 0))
    sent = sync_in_process(trainer, [engine], 1, with_base=False, max_bucket_bytes=BOUND)
    assert len(sent) > 5
    from launcher.workers.hf.lora import merged_state
    from launcher.workers.hf.model import VISION_PREFIX

    expected = merged_state(trainer.model, VISION_PREFIX)
    state = engine.model.state_dict()
    assert all(torch.equal(state[n], t) for n, t in expected.items())
    assert not torch.equal(expected["model.language_model.layers.0.self_attn.o_proj.weight"],
                           merged_state(trainer.model, VISION_PREFIX, with_delta=False)[
                               "model.language_model.layers.0.self_attn.o_proj.weight"])
