"""CUDA IPC weight sync on one GPU (skipped without CUDA): trainer rank 0 in this process, an hf
engine in a second process on the same GPU (device/harness/engine_process.py), driven by
weight_sync.stream_weights as a colocated run drives them. After the sync the engine's
weights equal the trainer's bit for bit, and rank 0's device memory, which held the bucket
buffers until the driver confirmed the engine's finish, is back to what it was before.

    PYTHONPATH=. python -m pytest tests/gpu/test_ipc_sync_gpu.py -m gpu -q -s
"""
import pytest

from launcher.contract.spec import ActorSpec

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

OVERRIDES = ["recipe=tiny_grpo", "model=tiny", "model.dtype=bfloat16", "cluster=h200x1", "inference.backend=hf",
             "inference.engines=1", "inference.tp=1", "placement.mode=colocated", "algorithm.max_response_len=3"]
SMALL_BUCKET_BYTES = 64 << 10
"""Many buckets: fused expert weights span several, and rank 0's keep-alive window turns over."""


@pytest.fixture(scope="module")
def engine():
    from device.harness.engine_process import EngineProcess

    process = EngineProcess(OVERRIDES)
    process.wait_started()
    yield process
    process.close()


def _trainer(backend: str):
    """Trainer rank 0 of a one-rank mesh, its weights moved off the engine's (same seed) init."""
    from launcher.config.compose import compose
    from launcher.workers import trainer_class

    if backend == "megatron":
        pytest.importorskip("megatron.core", reason="megatron-core not installed")
    cfg = compose([*OVERRIDES, f"trainer.backend={backend}"]).config
    trainer = trainer_class(backend)(ActorSpec.planned(cfg, 0, 1))
    if backend == "megatron":
        from device.harness.megatron_setup import init_distributed

        init_distributed()  # a process group of one, then the model
        trainer.init_distributed("127.0.0.1", 0)
    torch.manual_seed(1)
    with torch.no_grad():
        for param in trainer.model.parameters():
            param.add_(torch.randn_like(param), alpha=0.05)
    return trainer


@pytest.mark.parametrize("backend", ["hf", "megatron"])
def test_ipc_sync_lands_bit_for_bit_and_frees_rank0s_buffers(engine, backend):
    from device.harness.engine_process import LocalTrainers
    from launcher.plan.sync import SyncTransport
    from launcher.weight_sync.pump import stream_weights

    trainer = _trainer(backend)
    expected = {name: t.detach().to("cpu") for _, name, t in trainer._weight_stream(with_base=False)}
    before = engine.call("checkpoint_state")
    assert before.keys() == expected.keys()
    assert any(not torch.equal(before[n], t) for n, t in expected.items())  # the sync has something to move
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    trainers = LocalTrainers(trainer, SyncTransport.cuda_ipc)
    stats = stream_weights(trainers, engine, 1, with_base=False, wait=True, max_bucket_bytes=SMALL_BUCKET_BYTES)
    assert stats.buckets > 5
    assert trainers.held_at_release > baseline  # the last buffers stayed until the engine's finish was confirmed
    assert torch.cuda.memory_allocated() == baseline  # then release_export freed them
    after = engine.call("checkpoint_state")
    wrong = [n for n, t in expected.items() if not (after[n].dtype == t.dtype and torch.equal(after[n], t))]
    assert not wrong, f"{len(wrong)} of {len(expected)} tensors differ, e.g. {wrong[:3]}"
    print(f"\n{backend}: {stats.buckets} buckets, {stats.nbytes} bytes, rank 0 held "
          f"{trainers.held_at_release - baseline} bytes until release, peak +{torch.cuda.max_memory_allocated() - baseline}")


def test_an_engine_on_another_gpu_is_told_why_it_cannot_map_the_bucket(engine):
    from launcher.weight_sync.messages import IpcBuffer, WeightBucket, WeightUpdate

    bucket = WeightBucket("weights", [], 4, last=True,
                          ipc=IpcBuffer(["w"], ["float32"], [[1]], [4], {"GPU-00000000-not-this-one": ()}))
    engine.call("begin_weight_update", WeightUpdate(9))
    with pytest.raises(RuntimeError, match=r"hf engine 0 on GPU .* got a CUDA IPC weight bucket exported on GPU\(s\) "
                                           r"\['GPU-00000000-not-this-one'\]: CUDA IPC needs the engine on trainer "
                                           r"rank 0's GPU"):
        engine.call("load_weight_bucket", bucket)
