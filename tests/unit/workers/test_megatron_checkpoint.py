"""Megatron trainer checkpoints on CPU (launcher/workers/megatron/checkpoint.py and checkpoint_*.py): a resumed
trainer continues bit for bit (full fine-tuning and LoRA, sync and async writes), checkpoints
reshard between meshes (DP2, TP2, EP2, TP2+ETP2 <-> one rank; weights and AdamW moments,
compared whole), LoRA holds only its adapters, a LoRA checkpoint refuses another base, and a
damaged file is named. The distributed optimizer (GPU) is checked by
tests/gpu/test_megatron_resume_gpu.py; its range-to-chunk cutting is checked here.

    .venv/bin/python -m pytest tests/unit/workers/test_megatron_checkpoint.py -q
"""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from launcher.contract.spec import ActorSpec
from tests.unit.megatron_world import init_world_of_one, run_on_two_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

LORA = ["trainer.lora.rank=4", "trainer.lora.alpha=8", "trainer.lora.targets=[q_proj,o_proj,linear_fc1,linear_fc2,linear_proj]"]
IDENT = {"kind": "full", "lora": None, "base": {"random_init_seed": 0, "arch_sha256": "test"}}
MESHES = {"dp2": (1, 1, 1), "tp2": (2, 1, 1), "ep2": (1, 2, 1), "tp2_etp2": (2, 1, 2)}


def _trainer(*overrides):
    from launcher.workers.megatron import MegatronTrainer
    from tests.unit.workers.test_megatron_backend import _config

    init_world_of_one()
    trainer = MegatronTrainer(ActorSpec.planned(_config(*overrides), 0, 1))
    trainer.init_distributed("127.0.0.1", 0)
    return trainer


def _weights(trainer) -> dict:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


def _folder_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


# ---------------------------------------------------------------- layout (pure)

@pytest.mark.parametrize("shape", [(7,), (4, 6), (3, 4, 5), (2, 1, 3, 2)])
def test_flat_boxes_cover_a_range_once_in_order(shape):
    from math import prod

    from launcher.workers.megatron.checkpoint_layout import flat_boxes

    n = prod(shape)
    whole = torch.arange(n).view(shape)
    for start in range(n):
        for end in range(start + 1, n + 1):
            got = torch.cat([whole[tuple(slice(o, o + s) for o, s in zip(off, size, strict=True))].reshape(-1)
                             for off, size in flat_boxes(shape, start, end)])
            assert torch.equal(got, torch.arange(start, end)), (shape, start, end)
            assert len(flat_boxes(shape, start, end)) <= 2 * len(shape) - 1


def test_strided_shard_is_blocks_of_the_whole_tensor_and_flat_ranges_map_into_them(monkeypatch):
    """fc1 (gate|up, stride 2) split over TP4: rank 1 holds rows [32:64) and [160:192) of the
    whole [256, 8]; any DP range of its flattened slice lands on exactly those elements."""
    from launcher.workers.megatron import checkpoint_layout as ck

    whole = torch.arange(256 * 8).view(256, 8)
    local = torch.cat([whole[32:64], whole[160:192]])
    monkeypatch.setattr(ck, "shard_splits", lambda param: [(0, 2, 1, 4, None)])  # (dim, stride, rank, size, group)
    shape, blocks = ck.layout(torch.empty(local.shape))
    assert shape == (256, 8) and [offset for _, offset in blocks] == [(32, 0), (160, 0)]
    assert all(torch.equal(local[s], whole[o[0]:o[0] + 32]) for s, o in blocks)
    flat = local.reshape(-1)
    for start, end in [(0, 512), (5, 261), (250, 263), (3, 4)]:
        chunks = ck.flat_chunks(flat[start:end], start, tuple(local.shape), blocks)
        for view, offset in chunks:
            assert torch.equal(view, whole[tuple(slice(o, o + n) for o, n in zip(offset, view.shape, strict=True))])
        assert sum(view.numel() for view, _ in chunks) == end - start


# ---------------------------------------------------------------- resume through the trainer

@pytest.mark.slow
@pytest.mark.parametrize("variant", ["full_sync", "full_async", "lora_async"])
def test_resumed_trainer_continues_bit_for_bit(variant, tmp_path):
    """N=2 steps, save, M=2 more; a fresh trainer that loads continues with the same losses,
    log-probs and weights as the uninterrupted one (CPU AdamW is deterministic)."""
    from tests.unit.workers.test_megatron_backend import _shard

    overrides = LORA if variant.startswith("lora") else []
    first = _trainer(*overrides)
    for _ in range(2):
        first.train_step(_shard())
    stats = first.save_checkpoint(str(tmp_path / "ckpt"), async_write=variant.endswith("async"))
    uninterrupted = [first.train_step(_shard())["loss"] for _ in range(2)]  # overlaps an async write
    deadline = time.monotonic() + 120
    while not first.checkpoint_written():  # what the driver asks at each phase boundary, without waiting
        assert time.monotonic() < deadline, "the async write never finished"
        time.sleep(0.05)
    write_s = first.finalize_checkpoint()
    print(variant, stats, "write_s", write_s)
    assert (stats["write_s"] is None) == variant.endswith("async") and write_s >= 0
    resumed = _trainer(*overrides)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    again = [resumed.train_step(_shard())["loss"] for _ in range(2)]
    assert again == uninterrupted
    assert resumed.logprobs(_shard()) == first.logprobs(_shard())
    want, got = _weights(first), _weights(resumed)
    assert all(torch.equal(want[n], got[n]) for n in want)


@pytest.mark.slow
def test_lora_checkpoint_holds_adapters_only_and_is_much_smaller(tmp_path):
    from launcher.workers.megatron.checkpoint import tensor_keys
    from tests.unit.workers.test_megatron_backend import _shard

    sizes, keys = {}, {}
    for kind, overrides in (("full", []), ("lora", LORA)):
        trainer = _trainer(*overrides)
        trainer.train_step(_shard())
        trainer.save_checkpoint(str(tmp_path / kind))
        sizes[kind], keys[kind] = _folder_bytes(str(tmp_path / kind)), tensor_keys(str(tmp_path / kind))
    print("checkpoint bytes: full", sizes["full"], "lora", sizes["lora"], "ratio", sizes["full"] / sizes["lora"])
    weights = [k for k in keys["lora"] if not k.startswith(("optimizer.", "rng."))]
    assert weights and all(".lora_A" in k or ".lora_B" in k for k in weights)
    assert {f"optimizer.exp_avg.{k}" for k in weights} <= set(keys["lora"])
    assert "layers.1.mlp.expert_bias" in keys["full"] and "word_embeddings" in keys["full"]
    assert sizes["lora"] * 5 < sizes["full"]


@pytest.mark.slow
def test_lora_checkpoint_refuses_another_base(tmp_path):
    from launcher.contract.errors import CheckpointMismatchError
    from launcher.workers.megatron.checkpoint_identity import check_identity

    trainer = _trainer(*LORA)
    trainer.save_checkpoint(str(tmp_path / "ckpt"))
    other = _trainer(*LORA, "run.seed=1")
    with pytest.raises(CheckpointMismatchError) as err:
        other.load_checkpoint(str(tmp_path / "ckpt"))
    assert "run.seed=0" in str(err.value) and "run.seed=1" in str(err.value)
    full = _trainer()
    with pytest.raises(CheckpointMismatchError, match="lora fine-tuning checkpoint but this run does full"):
        full.load_checkpoint(str(tmp_path / "ckpt"))
    a = {"kind": "lora", "lora": {}, "base": {"hf_path": "/m/a", "sha256": "1" * 64}}
    b = {"kind": "lora", "lora": {}, "base": {"hf_path": "/m/b", "sha256": "2" * 64}}
    with pytest.raises(CheckpointMismatchError) as err:
        check_identity("ckpt", a, b)
    assert "model.hf_path=/m/a" in str(err.value) and "model.hf_path=/m/b" in str(err.value)
    check_identity("ckpt", a, {**a, "base": {"hf_path": "/moved/a", "sha256": "1" * 64}})  # same weights, moved


def test_base_fingerprint_reads_the_index(tmp_path):
    from launcher.weight_sync.base_identity import base_fingerprint

    for name, text in (("a", '{"weight_map": {"x": "1.safetensors"}}'), ("b", '{"weight_map": {"x": "2.safetensors"}}')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors.index.json").write_text(text)
    assert base_fingerprint(str(tmp_path / "a")) != base_fingerprint(str(tmp_path / "b"))


@pytest.mark.slow
def test_damaged_or_missing_file_is_named(tmp_path):
    from launcher.contract.errors import CheckpointError

    trainer = _trainer()
    good = tmp_path / "good"
    trainer.save_checkpoint(str(good))
    data = sorted(good.glob("*.distcp"))[0]

    def broken(name, damage):
        folder = tmp_path / name
        subprocess.run(["cp", "-r", str(good), str(folder)], check=True)
        damage(folder)
        with pytest.raises(CheckpointError) as err:
            trainer.load_checkpoint(str(folder))
        return str(err.value)

    def flip(folder):
        with open(folder / data.name, "r+b") as f:
            f.seek(data.stat().st_size // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))

    assert f"{tmp_path / 'cut' / data.name} is" in broken("cut", lambda f: os.truncate(f / data.name, 100))
    assert f"{tmp_path / 'gone' / data.name} is missing" in broken("gone", lambda f: (f / data.name).unlink())
    assert f"{tmp_path / 'flip' / data.name} does not match" in broken("flip", flip)
    assert str(tmp_path / "meta" / "trainer.json") in broken("meta", lambda f: (f / "trainer.json").write_text("{"))
    assert str(tmp_path / "index" / ".metadata") in broken("index", lambda f: (f / ".metadata").write_bytes(b"x"))
    trainer.load_checkpoint(str(good))  # the original still loads


# ---------------------------------------------------------------- resharding (two CPU processes)

def _model_and_optimizer(mesh, lora: bool):
    from model.megatron.build import build_model, init_parallel
    from model.megatron.init import init_adapters, init_weights
    from model.megatron.lora import apply_lora
    from model.megatron.spec import ModelSpec
    from tests.shared_compose import compose_shipped

    init_parallel(*mesh)
    cfg = compose_shipped(["model=tiny"]).config
    model = build_model(ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype, pad_token_id=0), "cpu")
    init_weights(model, seed=0)
    if lora:
        apply_lora(model, ["linear_fc1", "linear_fc2", "linear_proj", "q_proj"], rank=4, alpha=8.0)
        init_adapters(model, seed=0)
    params = [p for p in model.parameters() if p.requires_grad]
    return model, torch.optim.AdamW(params, lr=1e-2)


def _step(model, optimizer, seed: int) -> None:
    """One AdamW step on a packed batch (this mesh's grads summed as DDP would)."""
    from megatron.core import parallel_state as ps

    from model.megatron import pack_lengths, token_logprobs
    from model.megatron.optim import sum_grads_without_ddp

    gen = torch.Generator().manual_seed(seed + ps.get_data_parallel_rank())
    ids_T = torch.randint(0, 64, (24,), generator=gen)
    loss = -token_logprobs(model(ids_T, pack_lengths([12, 12], "cpu")), ids_T.roll(-1)).mean()
    loss.backward()
    sum_grads_without_ddp(model)
    optimizer.step()
    optimizer.zero_grad()


def _whole(model, optimizer) -> dict:
    """Every saved tensor whole (gathered over the mesh): weights, buffers, AdamW moments."""
    from model.megatron.shards import gather_full

    names = {id(p): n for n, p in model.named_parameters()}
    out = {n: gather_full(p) for n, p in model.named_parameters()}
    out.update({n: b.clone() for n, b in model.named_buffers()})
    for param, state in optimizer.state.items():
        for key in ("exp_avg", "exp_avg_sq"):
            out[f"optimizer.{key}.{names[id(param)]}"] = gather_full(param, state[key])
    return out


def _worst(got: dict, want: dict) -> float:
    assert set(got) == set(want), set(got) ^ set(want)
    return max((got[k].double() - want[k].double()).abs().max().item() for k in want)


def _ident(lora: bool) -> dict:
    return {**IDENT, "kind": "lora", "lora": {"rank": 4}} if lora else IDENT


def _reshard_worker(rank: int, store: str, root: str, queue) -> None:
    import torch.distributed as dist

    from launcher.workers.megatron import checkpoint

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    results = {}
    for name, mesh in MESHES.items():
        for lora in (False, True):
            tag = f"{name}{'_lora' if lora else ''}"
            model, optimizer = _model_and_optimizer(mesh, lora)
            checkpoint.load(os.path.join(root, "one" + ("_lora" if lora else "")), model, optimizer, _ident(lora))
            loaded = _whole(model, optimizer)
            want = torch.load(os.path.join(root, f"one{'_lora' if lora else ''}.pt"), weights_only=True)
            results[f"load_{tag}"] = _worst({k: loaded[k] for k in want}, want)
            _step(model, optimizer, seed=3)
            checkpoint.save(os.path.join(root, tag), model, optimizer, _ident(lora))
            whole = _whole(model, optimizer)
            if rank == 0:
                saved = whole if not lora else {k: v for k, v in whole.items() if "lora_" in k}
                torch.save(saved, os.path.join(root, f"{tag}.pt"))
    queue.put((rank, results))
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.slow
def test_checkpoints_reshard_between_one_rank_and_two_rank_meshes(tmp_path):
    """World of one -> DP2 / TP2 / EP2 / TP2+ETP2 (full and LoRA), one step there, and back
    to one rank: every weight, buffer and AdamW moment, gathered whole, equals what was
    saved, bit for bit; each key also reads back whole without a process group."""

    from launcher.workers.megatron import checkpoint

    init_world_of_one()
    for lora in (False, True):
        model, optimizer = _model_and_optimizer((1, 1, 1), lora)
        _step(model, optimizer, seed=1)
        folder = str(tmp_path / ("one" + ("_lora" if lora else "")))
        checkpoint.save(folder, model, optimizer, _ident(lora))
        whole = _whole(model, optimizer)
        torch.save(whole if not lora else {k: v for k, v in whole.items() if "lora_" in k}, f"{folder}.pt")
    results = run_on_two_ranks(_reshard_worker, str(tmp_path), timeout_s=600)
    print("worst |loaded - saved| on two ranks:", json.dumps(results[0]))
    assert all(v == 0.0 for r in results.values() for v in r.values()), results
    init_world_of_one()
    for tag in [f"{n}{s}" for n in MESHES for s in ("", "_lora")]:
        lora = tag.endswith("_lora")
        model, optimizer = _model_and_optimizer((1, 1, 1), lora)
        checkpoint.load(str(tmp_path / tag), model, optimizer, _ident(lora))
        want = torch.load(tmp_path / f"{tag}.pt", weights_only=True)
        assert _worst({k: v for k, v in _whole(model, optimizer).items() if k in want}, want) == 0.0, tag
        read = checkpoint.read_tensors(str(tmp_path / tag), list(want))  # one load, not ~300 (45 s of the test)
        assert _worst(read, want) == 0.0, tag
        key = next(iter(want))
        assert torch.equal(checkpoint.read_tensor(str(tmp_path / tag), key), want[key]), tag
