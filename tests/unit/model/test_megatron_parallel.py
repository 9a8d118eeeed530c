"""TP / EP / ETP / DP meshes of the Megatron model on two CPU processes (gloo), against HF:
logits of a packed batch and every weight's gradient (shards gathered, partial grads summed
the way Megatron's DDP + finalize_model_grads do). The same code runs on GPUs with NCCL.

    .venv/bin/python -m pytest tests/unit/model/test_megatron_parallel.py -q
"""

import pytest

from tests.unit.megatron_world import megatron_core, run_on_two_ranks  # noqa: F401  (skips without megatron-core)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # two spawned processes: 20-75 s on the 2-core machine, load-dependent

LENGTHS = [24, 20, 30, 22]
MESHES = {"tp2": (2, 1, 1), "ep2_dp2": (1, 2, 1), "tp2_ep2": (2, 2, 1), "tp2_etp2": (2, 1, 2), "dp2": (1, 1, 1)}


def _hf_reference():
    from launcher.config.compose import compose
    from launcher.workers.hf.model import build_model as build_hf
    from launcher.workers.hf.model import checkpoint_state

    cfg = compose(["model=tiny"]).config
    hf = build_hf(cfg.model, pad_id=0, seed=0)
    gen = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, 64, (n,), generator=gen) for n in LENGTHS]
    logits = []
    for seq in ids:
        out = hf(input_ids=seq[None]).logits[0]
        logp = torch.log_softmax(out[:-1].float(), -1).gather(-1, seq[1:, None]).sum()
        (-logp).backward()
        logits.append(out.detach())
    grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in hf.named_parameters()}
    grads.update({n: torch.zeros_like(b) for n, b in hf.named_buffers()})
    return cfg, hf, ids, torch.cat(logits), checkpoint_state(hf, grads)


def _sum_partial_grads(model) -> None:
    """What finalize_model_grads + DDP do (as sums): TP-duplicated, expert, dense grads."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    for param in model.parameters():
        if param.grad is None:
            continue
        if getattr(param, "sequence_parallel", False):
            dist.all_reduce(param.grad, group=ps.get_tensor_model_parallel_group())
        group = ps.get_expert_data_parallel_group() if getattr(param, "allreduce", True) is False \
            else ps.get_data_parallel_group()
        dist.all_reduce(param.grad, group=group)


def _check_mesh(mesh, reference) -> dict:
    """One mesh on this rank: (worst |logit diff|, worst grad cosine, worst names) vs HF."""
    from megatron.core import parallel_state as ps

    from device.harness.parity import cosine
    from launcher.workers.hf.model import checkpoint_state
    from model.megatron import full_logits, pack_lengths, token_logprobs
    from model.megatron.build import build_model, init_parallel
    from model.megatron.mapping import megatron_from_hf
    from model.megatron.shards import gather_full
    from model.megatron.spec import ModelSpec
    from model.megatron.weights import load_hf_state

    cfg, hf, ids, ref_logits, hf_grads = reference
    init_parallel(*mesh)
    model = build_model(ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype, pad_token_id=0), "cpu")
    load_hf_state(model, checkpoint_state(hf))
    dp, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
    mine = list(range(dp_rank, len(ids), dp))
    flat = torch.cat([ids[i] for i in mine])
    pad = -len(flat) % ps.get_tensor_model_parallel_world_size()
    packed = pack_lengths([LENGTHS[i] for i in mine] + ([pad] if pad else []), "cpu")
    ids_T = torch.cat([flat, torch.zeros(pad, dtype=torch.long)])
    logits_TVl = model(ids_T, packed)
    logp_T = token_logprobs(logits_TVl, ids_T.roll(-1))
    keep = torch.ones(len(ids_T), dtype=torch.bool)
    keep[[end - 1 for _, end in packed.bounds]] = False
    (-logp_T[keep].sum()).backward()
    _sum_partial_grads(model)
    ref = torch.cat([ref_logits[sum(LENGTHS[:i]):sum(LENGTHS[:i + 1])] for i in mine])
    want = megatron_from_hf(hf_grads, model.spec)
    cosines = {n: cosine(gather_full(p, p.grad), want[n]) for n, p in model.named_parameters()
               if want[n].abs().sum() > 0}
    worst = sorted(cosines, key=cosines.get)[:3]
    return {"worst_logit": (full_logits(logits_TVl.detach())[: len(flat)] - ref).abs().max().item(),
            "worst_cosine": min(cosines.values()), "worst": [(n, round(cosines[n], 5)) for n in worst],
            "lora_gather_error": _lora_gather_error(model), **_streamed_export(model),
            "random_init_disagreement": _random_init_disagreement(model.spec),
            "expert_adapter_cosine": _expert_adapter_cosine(reference, packed, ids_T),
            "shared_adapter_cosine": (_shared_expert_adapter_cosine(reference, packed, ids_T)
                                      if mesh[2] == 1 else None)}


STREAM_BUCKET_BYTES = 16 << 10


def _streamed_export(model) -> dict:
    """The weight sync's export (LoRA merged, after _lora_gather_error) in small buckets:
    the same buckets on every rank (their gathers run in lockstep), only rank 0 keeps
    tensors, and they equal the whole model gathered at once and mapped by hf_from_megatron."""
    import torch.distributed as dist

    from launcher.weight_sync.export import buckets
    from launcher.weight_sync.transports.host import measured, to_host
    from model.megatron.mapping import hf_from_megatron
    from model.megatron.shards import gather_full
    from model.megatron.weights import base_tensors, hf_stream

    keep = to_host if dist.get_rank() == 0 else measured
    streamed = list(buckets((("weights", n, keep(t)) for n, t in hf_stream(model, merged=True)), STREAM_BUCKET_BYTES))
    owners = {f"{name}.weight": m for name, m in model.named_modules() if hasattr(m, "merged_weight")}
    whole = hf_from_megatron({name: gather_full(t, owners[name].merged_weight() if name in owners else None)
                              for name, t in base_tensors(model).items()}, model.spec)
    error = 0.0
    if dist.get_rank() == 0:
        error = max((whole[n] - t).abs().max().item() for b in streamed for n, t in b.tensors)
    assert all(t.device.type == "meta" for b in streamed for _, t in b.tensors) == (dist.get_rank() != 0)
    return {"stream_error": error, "stream_names": [n for b in streamed for n, _ in b.tensors] == list(whole),
            "stream_buckets": [([n for n, _ in b.tensors], b.nbytes) for b in streamed]}


def _adapted_backward(reference, packed, ids_T, shared: bool):
    """The tiny model with routed-expert adapters on this mesh; grads of the packed batch's
    log-likelihood, summed the way DDP does (sum_grads_without_ddp); the HF grads mapped."""
    from launcher.workers.hf.model import checkpoint_state
    from model.megatron import token_logprobs
    from model.megatron.build import build_model
    from model.megatron.init import init_adapters
    from model.megatron.lora import LoraGrouped, apply_lora
    from model.megatron.mapping import megatron_from_hf
    from model.megatron.optim import sum_grads_without_ddp
    from model.megatron.spec import ModelSpec
    from model.megatron.weights import load_hf_state

    cfg, hf, _, _, hf_grads = reference
    model = build_model(ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype, pad_token_id=0), "cpu")
    load_hf_state(model, checkpoint_state(hf))
    adapted = [model.get_submodule(name) for name in
               apply_lora(model, ["linear_fc1", "linear_fc2"], rank=4, alpha=8.0, share_expert_adapters=shared)]
    routed = [module for module in adapted if isinstance(module, LoraGrouped)]
    init_adapters(model, seed=7)
    if not shared:
        _cancelling_halves(routed)
    logp_T = token_logprobs(model(ids_T, packed), ids_T.roll(-1))
    keep = torch.ones(len(ids_T), dtype=torch.bool)
    keep[[end - 1 for _, end in packed.bounds]] = False
    (-logp_T[keep].sum()).backward()
    sum_grads_without_ddp(model)
    full_G = megatron_from_hf(hf_grads, model.spec)
    names = {id(m): n for n, m in model.named_modules()}
    return [(module, full_G[f"{names[id(module)]}.weight"]) for module in routed]


def _cancelling_halves(modules) -> None:
    """Per-expert A = [A1; A1] and B = [B1, -B1] (whole tensors, then this rank's shards):
    B A = 0 keeps the model at HF's weights, yet both halves get non-zero grads, so the
    ETP-duplicated half's grad (fc1's A, fc2's B) is checked as well as the split one."""
    from model.megatron.shards import gather_full, shard_of

    gen = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for module in modules:
            a, b = gather_full(module.lora_A), gather_full(module.lora_B)
            half = a.shape[1] // 2
            a1, b1 = torch.randn(a[:, :half].shape, generator=gen), torch.randn(b[..., :half].shape, generator=gen)
            module.lora_A.copy_(shard_of(torch.cat([a1, a1], 1), module.lora_A))
            module.lora_B.copy_(shard_of(torch.cat([b1, -b1], -1), module.lora_B))


def _expert_adapter_cosine(reference, packed, ids_T) -> float:
    """Per-expert adapters on any EP / ETP: with B A = 0, dL/dA = s B^T G and dL/dB = s G A^T
    per expert, G being HF's full-weight expert grad; worst cosine over both, gathered."""
    from device.harness.parity import cosine
    from model.megatron.shards import gather_full

    cosines = []
    for module, full_G in _adapted_backward(reference, packed, ids_T, shared=False):
        a, b = gather_full(module.lora_A).float(), gather_full(module.lora_B).float()
        want_A = module.scale * torch.einsum("eor,eoi->eri", b, full_G)
        want_B = module.scale * torch.einsum("eoi,eri->eor", full_G, a)
        cosines.append(cosine(gather_full(module.lora_A, module.lora_A.grad), want_A))
        cosines.append(cosine(gather_full(module.lora_B, module.lora_B.grad), want_B))
    return min(cosines)


def _shared_expert_adapter_cosine(reference, packed, ids_T) -> float:
    """One LoRA adapter shared by each layer's routed experts (any EP): after the grad sums
    DDP does, dL/dB = s sum_e G_e A^T from HF's full-weight expert grads (B = 0)."""
    from device.harness.parity import cosine

    cosines = []
    for module, full_G in _adapted_backward(reference, packed, ids_T, shared=True):
        want = module.scale * torch.einsum("eoi,ri->or", full_G, module.lora_A.detach())
        cosines.append(cosine(module.lora_B.grad, want))
    return min(cosines)


def _random_init_disagreement(spec) -> float:
    """Random init (no checkpoint) + LoRA on this mesh: the whole (gathered) value of every
    tensor must be the same on every rank; otherwise replicas started out different.
    Returns the largest spread of per-tensor checksums over the ranks."""
    import torch.distributed as dist

    from model.megatron.build import build_model
    from model.megatron.init import init_adapters, init_weights
    from model.megatron.lora import apply_lora
    from model.megatron.shards import gather_full

    model = build_model(spec, "cpu")
    init_weights(model, seed=5)
    targets = ["linear_fc1", "linear_fc2", "linear_proj", "linear_q_down_proj", "q_proj", "o_proj"]
    apply_lora(model, targets, rank=4, alpha=8.0)
    init_adapters(model, seed=5)
    sums = torch.stack([torch.stack([(full := gather_full(p).double()).sum(), full.square().sum()])
                        for p in model.parameters()])
    every = [torch.empty_like(sums) for _ in range(dist.get_world_size())]
    dist.all_gather(every, sums)
    return max((other - sums).abs().max().item() for other in every)


def _lora_gather_error(model) -> float:
    """Worst |gathered merged weight - (gathered base + s B A from gathered adapters)|: the
    adapter export and the merged export must describe the same model on any mesh."""
    from model.megatron.lora import apply_lora
    from model.megatron.shards import gather_full, shard_of

    targets = ["linear_fc1", "linear_fc2", "linear_proj", "linear_q_up_proj", "q_proj", "o_proj"]
    apply_lora(model, targets, rank=4, alpha=8.0)
    gen = torch.Generator().manual_seed(3)
    worst = 0.0
    for module in model.modules():
        if not hasattr(module, "lora_B"):
            continue
        with torch.no_grad():
            full_B = torch.randn(gather_full(module.lora_B).shape, generator=gen)
            module.lora_B.copy_(shard_of(full_B, module.lora_B))
        a, b = gather_full(module.lora_A), gather_full(module.lora_B)
        want = gather_full(module.weight) + module.scale * torch.matmul(b, a)
        worst = max(worst, (gather_full(module.weight, module.merged_weight()) - want).abs().max().item())
    return worst


def _worker(rank: int, store: str, queue) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    reference = _hf_reference()
    results = {name: _check_mesh(mesh, reference) for name, mesh in MESHES.items()}
    queue.put((rank, results))
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def mesh_results() -> dict:
    return run_on_two_ranks(_worker)


@pytest.mark.parametrize("name", list(MESHES))
def test_mesh_matches_hf_logits_and_grads(mesh_results, name):
    for rank in (0, 1):
        stats = mesh_results[rank][name]
        assert stats["worst_logit"] < 1e-4, (rank, stats)
        assert stats["worst_cosine"] > 0.9999, (rank, stats)
        assert stats["lora_gather_error"] < 1e-5, (rank, stats)
        assert stats["random_init_disagreement"] == 0.0, (rank, stats)
        assert stats["expert_adapter_cosine"] > 0.9999, (rank, stats)
        assert stats["shared_adapter_cosine"] is None or stats["shared_adapter_cosine"] > 0.9999, (rank, stats)
        assert stats["stream_error"] == 0.0 and stats["stream_names"], (rank, stats["stream_error"])
    assert mesh_results[0][name]["stream_buckets"] == mesh_results[1][name]["stream_buckets"]
    assert len(mesh_results[0][name]["stream_buckets"]) > 1
    assert all(nbytes <= STREAM_BUCKET_BYTES for names, nbytes in mesh_results[0][name]["stream_buckets"]
               if len(names) > 1)
