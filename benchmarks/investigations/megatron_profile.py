"""Where one fwd+bwd step goes on one GPU, HF glm5_next next to the Megatron model (issue 6).

    PYTHONPATH=. python benchmarks/investigations/megatron_profile.py --model glm5_3_flash_4layer --compiled --out profile.json
    smoke test (CPU):  ... --device cpu --model tiny --tokens 256

For each model: median step seconds, the CUDA kernel time summed over the step and the
number of kernel launches (kernel time far below the step time means the GPU waits for
Python), and the largest kernels with their launch counts. For the Megatron model also
every sub-module's own fwd+bwd time, replayed on the inputs it saw in the step (mHC,
norms, token mixers, MLPs, the head), eager and under torch.compile, which says what
fusing it would save. Both models train every weight; grads are set to None between steps.
"""
import argparse
import time
from functools import partial

import torch

import model.megatron.layer as layer_module
from benchmarks.harness.megatron_setup import build_hf_on_gpu, init_distributed, megatron_from_hf_model
from benchmarks.megatron_throughput import emit, hf_loss, log, meg_loss, timed, train_step
from launcher.config.compose import compose
from model.megatron import pack_lengths

REPLAYED = ("attn_hc", "input_layernorm", "self_attention", "ffn_hc", "pre_mlp_layernorm", "mlp")
FUSIBLE = ("attn_hc", "ffn_hc", "input_layernorm", "pre_mlp_layernorm", "hc_merge")


def kernel_table(step, count: int) -> dict:
    """CUDA kernel time and launches of one step, and the `count` largest kernels."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    events.sort(key=lambda e: e.device_time_total, reverse=True)
    return {"kernel_ms": round(sum(e.device_time_total for e in events) / 1e3, 1),
            "launches": sum(e.count for e in events),
            "top": [[e.key[:100], round(e.device_time_total / 1e3, 2), e.count] for e in events[:count]]}


def measure(model, loss_fn, args, iters: int, kernels: int) -> dict:
    step = partial(train_step, model, loss_fn, *args)
    device = args[0].device
    seconds = timed(step, iters, device)
    table = kernel_table(step, kernels) if device.type == "cuda" else {}
    return {"step_s": seconds, "tokens_per_s": args[0].numel() / seconds, **table}


def capture_inputs(meg, ids_T, packed) -> dict[str, tuple]:
    """Each replayed sub-module's positional inputs in one forward, detached, and those of
    each layer's two hc_merge calls (a function) as "layers.i.hc_merge_attn" / "_mlp"."""
    seen, hooks, merge = {}, [], layer_module.hc_merge

    def record(key, args):
        seen[key] = tuple(a.detach() if torch.is_tensor(a) else a for a in args)

    def recording_merge(*args):
        layer = max(int(k.split(".")[1]) for k in seen)
        record(f"layers.{layer}.hc_merge_{'mlp' if f'layers.{layer}.mlp' in seen else 'attn'}", args)
        return merge(*args)

    for i, layer in enumerate(meg.layers):
        for name in REPLAYED:
            hooks.append(getattr(layer, name).register_forward_pre_hook(
                lambda module, args, key=f"layers.{i}.{name}": record(key, args)))
    layer_module.hc_merge = recording_merge
    try:
        with torch.no_grad():
            meg(ids_T, packed)
    finally:
        layer_module.hc_merge = merge
        for h in hooks:
            h.remove()
    return seen


def fwd_bwd(fn, args) -> None:
    live = [a.requires_grad_(a.is_floating_point()) if torch.is_tensor(a) else a for a in args]
    outs = [o for o in torch.utils._pytree.tree_leaves(fn(*live)) if torch.is_tensor(o) and o.requires_grad]
    torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])


def replay(meg, seen: dict[str, tuple], iters: int, compiled: bool) -> dict[str, float]:
    """Milliseconds of fwd+bwd per sub-module (and compile seconds per compiled one; only
    layer 0's are compiled: every layer's mHC and norms have the same shapes)."""
    out = {}
    for key, args in seen.items():
        leaf = key.rsplit(".", 1)[-1]
        fn = layer_module.hc_merge if leaf.startswith("hc_merge") else meg.get_submodule(key)
        if compiled:
            if not leaf.startswith(FUSIBLE) or not key.startswith("layers.0."):
                continue
            torch._dynamo.reset()
            fn = torch.compile(fn, dynamic=False)
            start = time.perf_counter()
            fwd_bwd(fn, args)
            out[f"{key} compile_s"] = round(time.perf_counter() - start, 1)
        meg.zero_grad(set_to_none=True)
        out[key] = round(timed(partial(fwd_bwd, fn, args), iters, meg.output_layer.device) * 1e3, 2)
    meg.zero_grad(set_to_none=True)
    return out


def run(model_name: str, seq_len: int, iters: int, kernels: int, compiled: bool, device_type: str) -> dict:
    device = init_distributed(device_type=device_type)
    cfg = compose([f"model={model_name}"]).config
    ids_T = torch.randint(0, cfg.model.arch.vocab_size, (seq_len,), device=device,
                          generator=torch.Generator(device=device).manual_seed(7))
    out = {"model": model_name, "tokens": seq_len}
    hf = build_hf_on_gpu(cfg.model, seed=0, device=device)
    out["hf"] = measure(hf, hf_loss, (ids_T,), iters, kernels)
    hf.zero_grad(set_to_none=True)
    log("hf", {k: v for k, v in out["hf"].items() if k != "top"})
    meg = megatron_from_hf_model(hf, cfg.model, device)
    del hf
    torch.cuda.empty_cache()
    packed = pack_lengths([seq_len], device)
    out["megatron"] = measure(meg, meg_loss, (ids_T, packed), iters, kernels)
    out["speedup_vs_hf"] = out["hf"]["step_s"] / out["megatron"]["step_s"]
    log("megatron", {k: v for k, v in out["megatron"].items() if k != "top"})
    meg.zero_grad(set_to_none=True)
    seen = capture_inputs(meg, ids_T, packed)
    out["module_ms_eager"] = replay(meg, seen, iters, compiled=False)
    log("modules", out["module_ms_eager"])
    if compiled:
        out["module_ms_compiled"] = replay(meg, seen, iters, compiled=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="glm5_3_flash_4layer")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--kernels", type=int, default=40, help="how many of the largest kernels to list")
    parser.add_argument("--compiled", action="store_true", help="also replay mHC and norms under torch.compile")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the script (no kernel table)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    emit(run(args.model, args.tokens, args.iters, args.kernels, args.compiled, args.device), args.out)


if __name__ == "__main__":
    main()
