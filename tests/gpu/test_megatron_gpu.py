"""Megatron GLM-5.3-Flash on a CUDA GPU (skipped without one): tiny-model bf16 parity
with HF glm5_next on a 4096-token sequence and a packed batch (fla chunk_kda, grouped
experts), and full fine-tuning steps through Megatron's DDP + distributed optimizer.
The 4-layer slice is checked by benchmarks/megatron_throughput.py (it needs the whole GPU).

    PYTHONPATH=. python -m pytest tests/gpu -m gpu -q
"""
import gc

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core", reason="megatron-core not installed")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

KL_MAX, DLOGP_MAX = 0.01, 0.07


@pytest.fixture(scope="module")
def device():
    from device.harness.megatron_setup import init_distributed

    return init_distributed()


def _tiny_cfg():
    from launcher.config.compose import compose

    return compose(["model=tiny", "model.dtype=bfloat16"]).config


def _tiny_trainer(device, lr: float, lora_rank: int = 0, cpu_offload: bool = False):
    """The tiny bf16 model (seed 0) under Megatron's DDP + distributed optimizer, and the loss
    of one fixed packed batch (the same tokens on every call)."""
    from device.harness.megatron_setup import DOMAIN_LORA_TARGETS
    from model.megatron import pack_lengths, token_logprobs
    from model.megatron.build import build_model
    from model.megatron.init import init_adapters, init_weights
    from model.megatron.lora import apply_lora
    from model.megatron.optim import wrap_for_training
    from model.megatron.spec import ModelSpec

    cfg = _tiny_cfg()
    model = build_model(ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype), device)
    init_weights(model, seed=0)
    if lora_rank:
        apply_lora(model, DOMAIN_LORA_TARGETS, rank=lora_rank, alpha=2.0 * lora_rank)
        init_adapters(model, seed=0)
    ddp, optimizer = wrap_for_training(model, lr=lr, weight_decay=0.0, grad_clip=1.0, cpu_offload=cpu_offload)
    gen = torch.Generator(device=device).manual_seed(0)
    ids_T = torch.randint(0, cfg.model.arch.vocab_size, (512,), device=device, generator=gen)
    packed = pack_lengths([256, 256], device)

    def loss():
        return -token_logprobs(ddp(ids_T, packed), ids_T.roll(-1)).mean()

    return model, ddp, optimizer, loss


def test_tiny_bf16_logits_match_hf_long_and_packed(device):
    from device.harness.megatron_setup import build_hf_on_gpu, megatron_from_hf_model
    from device.harness.parity import kl_and_dlogp
    from model.megatron import full_logits, pack_lengths

    cfg = _tiny_cfg()
    hf = build_hf_on_gpu(cfg.model, seed=0, device=device).eval()
    meg = megatron_from_hf_model(hf, cfg.model, device)
    ids_T = torch.randint(0, cfg.model.arch.vocab_size, (4096,), device=device)
    lengths = [2560, 1024, 512]
    with torch.no_grad():
        single = kl_and_dlogp(hf(input_ids=ids_T[None]).logits[0], full_logits(meg(ids_T, pack_lengths([4096], device))),
                              ids_T.roll(-1))
        ref = torch.cat([hf(input_ids=s[None]).logits[0] for s in ids_T.split(lengths)])
        packed = kl_and_dlogp(ref, full_logits(meg(ids_T, pack_lengths(lengths, device))), ids_T.roll(-1))
    print("tiny bf16 parity", single, packed)
    for stats in (single, packed):
        assert stats["kl_per_token"] <= KL_MAX and stats["mean_abs_dlogp"] <= DLOGP_MAX, stats


def test_full_finetune_distributed_optimizer_lowers_loss(device):
    from model.megatron.optim import train_step

    _, ddp, optimizer, loss = _tiny_trainer(device, lr=1e-3)
    losses = [train_step(ddp, optimizer, [loss])["loss"] for _ in range(6)]
    print("full FT losses", losses)
    assert losses[-1] < losses[0] - 0.05, losses


def test_grouped_matmul_grads_match_a_loop_per_expert(device):
    """GroupedMM's hand-written backward (weight grad straight in [G, O, I]) against
    autograd through one matmul per expert, with an empty expert and unaligned widths."""
    from model.megatron.grouped import grouped_matmul

    gen = torch.Generator(device=device).manual_seed(0)
    counts = torch.tensor([5, 0, 17, 9], device=device)
    x = torch.randn(int(counts.sum()), 48, device=device, generator=gen).bfloat16().requires_grad_()
    w = torch.randn(4, 36, 48, device=device, generator=gen).bfloat16().requires_grad_()
    grad = torch.randn(x.shape[0], 36, device=device, generator=gen).bfloat16()
    got = grouped_matmul(x, w, counts)
    got_dx, got_dw = torch.autograd.grad(got, (x, w), grad)
    xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    want = torch.cat([blk @ wf[g].T for g, blk in enumerate(xf.split(counts.tolist()))])
    want_dx, want_dw = torch.autograd.grad(want, (xf, wf), grad.float())
    for a, b in ((got, want), (got_dx, want_dx), (got_dw, want_dw)):
        torch.testing.assert_close(a.float(), b, rtol=2e-2, atol=5e-2)
    assert got_dw.stride() == w.stride()


def test_offload_round_trip_leaves_training_unchanged(device):
    """Colocation moves the trainer to the host and back between steps (DeviceMover): GPU
    memory must drop and training must go on as if it had not moved. Full fine-tuning with
    the distributed optimizer, an fp32 router among bf16 weights (its main params alias the
    DDP buffer). Atomic adds make two runs differ by noise, far below three steps' update of
    any weight; a lost Adam state or a weight left behind would be of the update's size."""
    from launcher.workers.megatron.state import DeviceMover
    from model.megatron.optim import train_step

    def run(offload: bool):
        model, ddp, optimizer, loss = _tiny_trainer(device, lr=1e-3)
        start = {n: p.detach().float().clone() for n, p in model.named_parameters()}
        mover = DeviceMover(model, ddp, optimizer)
        weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        losses, freed = [], []
        for _ in range(3):
            losses.append(train_step(ddp, optimizer, [loss])["loss"])
            if offload:
                before = torch.cuda.memory_allocated()
                mover.to_host()
                freed.append(before - torch.cuda.memory_allocated())
                mover.to_device()
        return losses, [f / weight_bytes for f in freed], start, {n: p.detach().float() for n, p in model.named_parameters()}

    losses, freed_per_weight_byte, start, moved = run(offload=True)
    ref_losses, _, _, stayed = run(offload=False)
    assert min(freed_per_weight_byte) > 1.0, freed_per_weight_byte  # weights + fp32 grads + Adam states
    drift_per_update = {n: ((moved[n] - stayed[n]).norm() / (stayed[n] - start[n]).norm()).item()
                        for n in stayed if (stayed[n] - start[n]).norm() > 0}
    worst = max(drift_per_update, key=drift_per_update.get)
    print("offload round trip", losses, ref_losses, "worst drift/update", worst, drift_per_update[worst])
    assert drift_per_update[worst] < 0.25, (worst, drift_per_update[worst])
    assert abs(losses[-1] - ref_losses[-1]) < 0.01, (losses, ref_losses)


def test_optimizer_cpu_offload_keeps_lora_states_off_the_gpu(device):
    """trainer.optimizer.cpu_offload with LoRA (the only way the validator lets it run on
    megatron, MEM007): Adam moments and fp32 masters of the adapters live on the host (12 B
    per trainable parameter off the GPU), training works, and a colocation round trip
    (DeviceMover with the optimizer on the host) leaves it working."""
    from launcher.workers.megatron.state import DeviceMover
    from model.megatron.optim import train_step

    def run(cpu_offload: bool):
        model, ddp, optimizer, loss = _tiny_trainer(device, lr=1e-2, lora_rank=8, cpu_offload=cpu_offload)
        mover = DeviceMover(model, ddp, optimizer, optimizer_on_host=cpu_offload)
        losses = []
        for _ in range(4):
            losses.append(train_step(ddp, optimizer, [loss])["loss"])
            mover.to_host()
            mover.to_device()
        torch.cuda.synchronize()
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        return losses, torch.cuda.memory_allocated(), trainable

    base_losses, base_bytes, trainable = run(cpu_offload=False)
    gc.collect()
    torch.cuda.empty_cache()
    host_losses, host_bytes, _ = run(cpu_offload=True)
    saved_per_param = (base_bytes - host_bytes) / trainable
    print("optimizer cpu offload", host_losses, base_losses, "GPU bytes saved per trainable param", saved_per_param)
    assert saved_per_param >= 11.5, saved_per_param
    assert host_losses[-1] < host_losses[0] - 0.05, host_losses
    assert abs(host_losses[-1] - base_losses[-1]) < 0.05, (host_losses, base_losses)
