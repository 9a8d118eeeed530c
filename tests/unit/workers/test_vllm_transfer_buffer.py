"""vLLM's packed IPC/NCCL buffer is sized by the plan: at least the largest single tensor
streamed and the bucket (vLLM's 1 GiB default is below GLM-5.3-Flash's 1.18 GiB embedding)."""
from launcher.plan.sync import SYNC_BUCKET_GIB, largest_tensor_elements, transfer_buffer_bytes

GIB = 2**30


def test_real_glm_buffer_holds_the_embedding_and_lm_head(point):
    p = point("recipe=dapo_fullft")
    arch = p.cfg.model.arch
    embed_bytes = arch.vocab_size * arch.hidden_size * 2  # 154880 x 4096 x bf16
    assert embed_bytes / GIB > 1.18
    elements, which = largest_tensor_elements(arch)
    assert elements * 2 == embed_bytes and "embed" in which
    assert p.plan.sync.largest_tensor_bytes == embed_bytes
    assert p.plan.sync.transfer_buffer_bytes >= embed_bytes > 1 << 30
    assert p.plan.sync.transfer_buffer_bytes == transfer_buffer_bytes(p.cfg)
    assert p.plan.sync.transfer_buffer_bytes % (1 << 20) == 0


def test_small_models_still_get_a_whole_bucket(point):
    p = point("recipe=tiny_qwen3_vllm")
    assert p.plan.sync.largest_tensor_bytes < GIB
    assert p.plan.sync.transfer_buffer_bytes == int(SYNC_BUCKET_GIB * GIB)


def test_a_dense_mlp_wider_than_the_embedding_sets_the_buffer(point):
    p = point("recipe=dapo_fullft", "model.arch.intermediate_size=200000")
    assert "dense mlp" in p.plan.sync.largest_tensor
    assert p.plan.sync.transfer_buffer_bytes >= 200000 * 4096 * 2


def test_the_trainer_ships_the_planned_buffer_to_vllm(point, monkeypatch):
    """IPC and NCCL init infos carry packed_buffer_size_bytes (vLLM classes stubbed when absent)."""
    import sys
    import types
    from dataclasses import dataclass

    from launcher.weight_sync.transports import transport_for

    @dataclass
    class Info:
        rank: int
        packed: bool = True
        packed_buffer_size_bytes: int = 1 << 30
        master_address: str | None = None
        master_port: int | None = None
        world_size: int = 0

    for mod, cls in (("ipc_engine", "IPCTrainerInitInfo"), ("nccl_engine", "NCCLTrainerInitInfo")):
        name = f"vllm.distributed.weight_transfer.{mod}"
        if name not in sys.modules:
            monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(**{cls: Info}))
            for parent in ("vllm", "vllm.distributed", "vllm.distributed.weight_transfer"):
                if parent not in sys.modules:
                    monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
    colocated = point("recipe=dapo_fullft")
    ipc = transport_for(colocated.plan.sync.transport).trainer_init_info(colocated.cfg, rank=0)
    assert ipc.packed_buffer_size_bytes == colocated.plan.sync.transfer_buffer_bytes > 1.18 * GIB
    async_ = point("recipe=dapo_async")
    nccl = transport_for(async_.plan.sync.transport).trainer_init_info(async_.cfg, rank=0, master_address="h",
                                                                       master_port=1)
    assert nccl.packed_buffer_size_bytes == async_.plan.sync.transfer_buffer_bytes > 1.18 * GIB
