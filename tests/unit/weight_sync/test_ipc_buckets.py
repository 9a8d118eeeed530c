"""CUDA IPC weight buckets, what runs without a GPU: which transport a config gets (and the
plan's price for it), that the driver hands the trainer group's transport to the trainer,
and the packed-buffer format (the bytes of a real stream, packed and unpacked, bit for bit;
vLLM's packed consumer reads the same layout). The handles themselves are GPU-only:
tests/gpu/test_ipc_sync_gpu.py."""
import pytest
import torch

from launcher.contract.spec import ActorSpec
from launcher.plan.sync import SyncTransport, bucketed_seconds, sync_transport, transfer_buffer_bytes
from launcher.weight_sync.messages import IpcBuffer
from launcher.weight_sync.pump import stream_weights
from launcher.weight_sync.transports.cuda_ipc import PackedBucket, unpack
from launcher.workers import trainer_class
from tests.shared_compose import compose_shipped

GPU_HF = ["recipe=tiny_grpo", "cluster=h200x1", "inference.backend=hf", "inference.engines=1", "placement.mode=colocated"]


@pytest.fixture(scope="module")
def tiny():
    """(config, hf trainer rank) of the default tiny recipe on this CPU."""
    cfg = compose_shipped(["recipe=tiny_grpo", "algorithm.max_response_len=3"]).config
    return cfg, trainer_class("hf")(ActorSpec.planned(cfg, 0, 1))


HOST, CUDA_IPC = SyncTransport.host, SyncTransport.cuda_ipc
VLLM = ["recipe=tiny_grpo", "inference.backend=vllm", "inference.engines=1"]


@pytest.mark.parametrize("overrides, transport", [
    (GPU_HF, CUDA_IPC),
    (["recipe=tiny_grpo", "cluster=h200x2", "inference.backend=hf", "inference.engines=2", "placement.mode=colocated"], HOST),
    (["recipe=tiny_grpo", "cluster=local", "inference.backend=hf", "inference.engines=1", "placement.mode=colocated"], HOST),
    (["recipe=tiny_grpo", "cluster=h200x2", "inference.backend=hf", "inference.engines=1", "placement.mode=async"], HOST),
    ([*VLLM, "cluster=h200x1", "placement.mode=colocated"], SyncTransport.vllm_ipc),
    ([*VLLM, "cluster=h200x2", "placement.mode=async"], SyncTransport.vllm_nccl),
    ([*VLLM, "cluster=h200x1", "placement.mode=colocated", "trainer.lora.rank=4", "trainer.lora.merge=false"], HOST),
    ([*VLLM, "cluster=local", "placement.mode=colocated"], HOST),
])
def test_each_placement_gets_its_transport(point, overrides, transport):
    """cuda_ipc only for an hf engine on trainer rank 0's GPU (others sit on other GPUs or
    hosts); vLLM's own transfer for merged or full weights on GPUs; host buckets otherwise."""
    p = point(*overrides)
    assert sync_transport(p.cfg) == p.plan.sync.transport == transport


def test_the_plan_prices_each_transport_at_its_own_rate(point):
    ipc, host = point(*GPU_HF).plan.sync, point(*GPU_HF, "cluster=local").plan.sync
    assert (ipc.link, host.link) == ("cuda_ipc", "host_staged")
    assert ipc.seconds == pytest.approx(bucketed_seconds(ipc.bytes_per_engine, CUDA_IPC))
    assert host.seconds == pytest.approx(bucketed_seconds(host.bytes_per_engine, HOST))


@pytest.mark.slow
def test_the_driver_hands_the_groups_transport_to_the_trainer(tiny):
    """the pump applies TrainerGroup.transport; a CPU rank asked for CUDA IPC says why."""
    _, trainer = tiny

    class Trainers:
        transport = CUDA_IPC

        def begin_export(self, version, with_base, max_bucket_bytes, transport):
            return trainer.begin_export(version, with_base, max_bucket_bytes, transport)

    class Engines:
        def begin_weight_update(self, update):
            raise AssertionError("the export must fail before any engine is told")

    with pytest.raises(ValueError, match=r"transport='cuda_ipc' needs trainer rank 0 on a CUDA device; it is on cpu"):
        stream_weights(Trainers(), Engines(), 1, with_base=False, wait=True, max_bucket_bytes=1 << 20)
    with pytest.raises(ValueError, match=r"transport='vllm_nccl': not a bucket transport"):
        trainer.begin_export(1, False, 1 << 20, SyncTransport.vllm_nccl)
    with pytest.raises(LookupError, match=r"unknown weight-sync transport 'nvlink'; known: cuda_ipc, host, vllm_ipc"):
        trainer.begin_export(1, False, 1 << 20, "nvlink")


def _ipc_buffer(packed: PackedBucket) -> IpcBuffer:
    return IpcBuffer(packed.names, packed.dtype_names, packed.shapes, packed.tensor_sizes, ipc_handles={})


def test_a_real_stream_packs_into_plan_sized_buffers_and_unpacks_bit_for_bit(tiny):
    """Each tensor of the tiny model's stream fits a buffer of the plan's size for a small
    bucket bound (the planner sizes from the arch fields, the stream is real); the whole
    stream packed in one buffer unpacks to the same tensors."""
    cfg, trainer = tiny
    stream = [(name, t.detach().clone()) for _, name, t in trainer._weight_stream(with_base=False)]
    capacity = transfer_buffer_bytes(cfg, 64 << 10)
    assert max(t.numel() * t.element_size() for _, t in stream) <= capacity
    for name, tensor in stream:  # each tensor alone in a plan-sized buffer: the largest fits
        PackedBucket(capacity, torch.device("cpu"), kept=[]).add(name, tensor)
    whole = PackedBucket(sum(t.numel() * t.element_size() for _, t in stream), torch.device("cpu"), kept=[])
    for name, tensor in stream:
        whole.add(name, tensor)
    out = unpack(whole.packed(), _ipc_buffer(whole))
    assert [n for n, _ in out] == [n for n, _ in stream]
    assert all(a.dtype == b.dtype and torch.equal(a, b) for (_, a), (_, b) in zip(out, stream, strict=True))


def test_mixed_dtypes_views_and_odd_offsets_round_trip():
    fused = torch.arange(24, dtype=torch.bfloat16).view(6, 4)
    named = [("half", fused[:3].t()), ("odd", torch.arange(3, dtype=torch.bfloat16)),  # 6 bytes: fp32 after it is odd
             ("f32", torch.rand(5)), ("scalar", torch.tensor(7, dtype=torch.int64)), ("empty", torch.zeros(0, 3))]
    packed = PackedBucket(256, torch.device("cpu"), kept=[])
    for name, tensor in named:
        packed.add(name, tensor)
    assert packed.tensor_sizes == [24, 6, 20, 8, 0] and packed.nbytes == 58
    out = dict(unpack(packed.packed(), _ipc_buffer(packed)))
    for name, tensor in named:
        assert out[name].shape == tensor.shape and out[name].dtype == tensor.dtype and torch.equal(out[name], tensor)


def test_a_tensor_the_plan_did_not_size_for_is_refused_by_name():
    packed = PackedBucket(64, torch.device("cpu"), kept=[])
    packed.add("small", torch.zeros(8))
    with pytest.raises(ValueError, match=r"weight big \(64 bytes\) does not fit the CUDA IPC bucket buffer "
                                         r"\(64 bytes, 32 used\).*transfer_buffer_bytes"):
        packed.add("big", torch.zeros(16))


def test_vllms_packed_consumer_reads_the_same_layout():
    """vLLM's own update-info check and unpack (packed_ipc_consumer minus the CUDA mapping)."""
    pytest.importorskip("vllm.distributed.weight_transfer.ipc_engine", reason="needs vllm (.venv-vllm)")
    from dataclasses import asdict

    from vllm.distributed.weight_transfer.ipc_engine import IPCWeightTransferUpdateInfo
    from vllm.distributed.weight_transfer.packed_tensor import unpack_tensor

    named = [("a", torch.rand(3, 4, dtype=torch.bfloat16)), ("b", torch.rand(6)), ("c", torch.arange(4))]
    packed = PackedBucket(1024, torch.device("cpu"), kept=[])
    for name, tensor in named:
        packed.add(name, tensor)
    info = IPCWeightTransferUpdateInfo(**asdict(_ipc_buffer(packed)))
    theirs = unpack_tensor(packed.packed(), info.names, info.shapes, [getattr(torch, d) for d in info.dtype_names],
                           info.tensor_sizes)
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(theirs, named, strict=True))
