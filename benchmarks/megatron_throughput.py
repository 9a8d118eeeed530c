"""Megatron GLM-5.3-Flash vs HF glm5_next on one GPU: logits parity, LoRA gradients,
fwd+bwd throughput and peak memory against the planner (issue 6).

    PYTHONPATH=. python benchmarks/megatron_throughput.py --model glm5_3_flash_4layer --out result.json

Order keeps both models inside one H200: HF builds (random, seeded), gives reference
logits (one 4096-token sequence, and a packed batch run one sequence at a time), then its
fwd+bwd is timed with every language weight trainable; its last gradients give the
expected LoRA gradients. The Megatron model is then loaded from HF's weights, HF freed,
and the same logits, timing and a LoRA step are measured. TFLOP/s = 6 x active x tokens / s.
"""
import argparse
import json
import time
from functools import partial

import torch

from device.harness.megatron_setup import (
    DOMAIN_LORA_TARGETS,
    build_hf_on_gpu,
    expected_b_grads,
    hf_grads,
    init_distributed,
    megatron_from_hf_model,
    perturb_for_signal,
)
from device.harness.parity import cosine, kl_and_dlogp
from launcher.config.compose import compose
from launcher.plan import make_plan
from model.megatron import full_logits, pack_lengths, token_logprobs
from model.megatron.lora import apply_lora
from model.megatron.spec import ModelSpec

LORA_RANK, LORA_ALPHA = 16, 32.0


def timed(step, iters: int, device: torch.device | None = None) -> float:
    """Median seconds of `step` after one warm-up call (which compiles and autotunes);
    CUDA is synchronised around each call unless `device` is a CPU."""
    on_gpu = device is None or device.type == "cuda"
    step()
    times = []
    for _ in range(iters):
        if on_gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if on_gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def train_step(model, loss_fn, *args) -> None:
    """One fwd+bwd as a plain PyTorch loop runs it: grads set to None first, so backward
    writes them instead of adding into zeroed buffers (50 ms a step on the 4-layer slice,
    whose 22B expert weights all train here)."""
    model.zero_grad(set_to_none=True)
    loss_fn(model, *args).backward()


def hf_loss(hf, ids_T):
    logits = hf(input_ids=ids_T[None], use_cache=False).logits[0, :-1].float()
    return torch.nn.functional.cross_entropy(logits, ids_T[1:])


def meg_loss(meg, ids_T, packed):
    logp_T = token_logprobs(meg(ids_T, packed), ids_T.roll(-1))
    return -logp_T[:-1].mean()


def lora_overrides(targets: list[str] = DOMAIN_LORA_TARGETS) -> list[str]:
    """The LoRA every GPU benchmark trains, as config overrides (for the planner's view)."""
    return [f"trainer.lora.rank={LORA_RANK}", f"trainer.lora.alpha={LORA_ALPHA}", "trainer.lora.normalize_moe_lora=true",
            f"trainer.lora.targets=[{','.join(targets)}]"]


def emit(result: dict, out: str | None) -> None:
    """Print the result as JSON and write it to `out` when given."""
    text = json.dumps(result, indent=1)
    print(text, flush=True)
    if out:
        with open(out, "w") as f:
            f.write(text)


def planner_gib(model_name: str, lora: bool) -> float:
    overrides = [f"model={model_name}", "cluster=h200x1", "trainer.backend=megatron",
                 "trainer.max_tokens_per_microbatch=4096"]
    if lora:
        overrides += lora_overrides()
    return make_plan(compose(overrides).config).memory.trainer.total_gib


def log(stage: str, value) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {stage}: {json.dumps(value)}", flush=True)


def top_kernels(step, count: int = 15) -> dict[str, float]:
    """CUDA time per kernel name over one step (ms), the largest first: where the step goes."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: e.device_time_total, reverse=True)[:count]
    return {e.key[:90]: round(e.device_time_total / 1e3, 2) for e in events}


def run(model_name: str, seq_len: int, iters: int, perturb: bool, profile: bool) -> dict:
    device = init_distributed()
    cfg = compose([f"model={model_name}"]).config
    plan = make_plan(compose([f"model={model_name}", "cluster=h200x1", "trainer.backend=megatron"]).config)
    vocab, active = cfg.model.arch.vocab_size, plan.params.active
    gen = torch.Generator(device=device).manual_seed(7)
    ids_T = torch.randint(0, vocab, (seq_len,), device=device, generator=gen)
    lengths = [seq_len * 5 // 8, seq_len // 4, seq_len - seq_len * 5 // 8 - seq_len // 4]
    out = {"model": model_name, "tokens": seq_len, "packed_lengths": lengths, "perturbed_init": perturb}

    hf = build_hf_on_gpu(cfg.model, seed=0, device=device)
    if perturb:
        perturb_for_signal(hf, seed=1)
    with torch.no_grad():
        ref_single = hf(input_ids=ids_T[None], use_cache=False).logits[0]
        ref_packed = torch.cat([hf(input_ids=s[None], use_cache=False).logits[0] for s in ids_T.split(lengths)])
    torch.cuda.reset_peak_memory_stats()

    hf_s = timed(partial(train_step, hf, hf_loss, ids_T), iters)
    out["hf"] = {"tokens_per_s": seq_len / hf_s, "tflops": 6 * active * seq_len / hf_s / 1e12,
                 "peak_gib": torch.cuda.max_memory_allocated() / 2**30}
    log("hf", out["hf"])
    meg_spec = ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype)
    a_values, want_dB = expected_b_grads(meg_spec, hf_grads(hf), DOMAIN_LORA_TARGETS, LORA_RANK,
                                         LORA_RANK // cfg.model.arch.num_experts_per_tok, LORA_ALPHA, seed=11)
    hf.zero_grad(set_to_none=True)
    meg = megatron_from_hf_model(hf, cfg.model, device)
    del hf
    torch.cuda.empty_cache()

    single, packed = pack_lengths([seq_len], device), pack_lengths(lengths, device)
    with torch.no_grad():
        targets = ids_T.roll(-1)
        out["parity_single"] = kl_and_dlogp(ref_single[:-1], full_logits(meg(ids_T, single))[:-1], targets[:-1])
        out["parity_packed"] = kl_and_dlogp(ref_packed, full_logits(meg(ids_T, packed)), targets)
    log("parity", [out["parity_single"], out["parity_packed"]])
    del ref_single, ref_packed
    torch.cuda.reset_peak_memory_stats()

    meg_s = timed(partial(train_step, meg, meg_loss, ids_T, single), iters)
    out["megatron"] = {"tokens_per_s": seq_len / meg_s, "tflops": 6 * active * seq_len / meg_s / 1e12,
                       "peak_gib": torch.cuda.max_memory_allocated() / 2**30}
    out["speedup_vs_hf"] = hf_s / meg_s
    log("megatron", out["megatron"])
    if profile:
        out["megatron_top_kernels_ms"] = top_kernels(partial(train_step, meg, meg_loss, ids_T, single))
    meg.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()
    out["lora"] = lora_check(meg, ids_T, single, a_values, want_dB, cfg.model.arch.num_experts_per_tok, iters)
    out["lora"]["planner_gib"] = planner_gib(model_name, lora=True)
    out["lora"]["measured_over_planner"] = out["lora"]["peak_reserved_gib"] / out["lora"]["planner_gib"]
    return out


def lora_check(meg, ids_T, packed, a_values, want_dB, topk: int, iters: int) -> dict:
    apply_lora(meg, DOMAIN_LORA_TARGETS, LORA_RANK, LORA_ALPHA, expert_rank=LORA_RANK // topk)
    params = dict(meg.named_parameters())
    with torch.no_grad():
        for name, value in a_values.items():
            params[name].copy_(value)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    meg_loss(meg, ids_T, packed).backward()
    got = {n: params[n].grad for n in want_dB}
    cosines = {n: cosine(got[n], want_dB[n]) for n in want_dB if want_dB[n].abs().sum() > 0}
    all_cos = cosine(torch.cat([got[n].flatten().float() for n in cosines]),
                     torch.cat([want_dB[n].flatten() for n in cosines]))

    lora_s = timed(partial(train_step, meg, meg_loss, ids_T, packed), iters)
    worst = min(cosines, key=cosines.get)
    return {"grad_cosine_all": all_cos, "grad_cosine_min": cosines[worst], "worst": worst, "adapters": len(cosines),
            "tokens_per_s": ids_T.numel() / lora_s, "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
            "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="glm5_3_flash_4layer")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--out", default=None)
    parser.add_argument("--profile", action="store_true", help="per-kernel CUDA time of one Megatron step")
    parser.add_argument("--perturb", action="store_true", help="move mHC base and k-pool weights off HF's constants")
    args = parser.parse_args()
    emit(run(args.model, args.tokens, args.iters, args.perturb, args.profile), args.out)


if __name__ == "__main__":
    main()
