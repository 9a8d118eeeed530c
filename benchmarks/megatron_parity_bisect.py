"""Which fused op moves the Megatron model's bf16 logits off HF's (issue 6).

    PYTHONPATH=. python benchmarks/megatron_parity_bisect.py --model glm5_3_flash_4layer --out bisect.json
    smoke test (CPU):  ... --device cpu --model tiny --tokens 256

On the random-init 4-layer slice an ulp anywhere upstream of a router or the DSA indexer
can flip a top-k choice, so per-token KL to HF measures how bitwise the forward is. One
sequence, HF's logits once; then the Megatron model with every fused function compiled,
with all of them eager, with hc_merge as HF's batched matmul, and from that eager base
with one function at a time compiled.
"""
import argparse
import contextlib

import torch

import model.megatron.kda as kda_module
import model.megatron.layer as layer_module
import model.megatron.mhc as mhc_module
import model.megatron.mlp as mlp_module
import model.megatron.moe as moe_module
import model.megatron.rmsnorm as rmsnorm_module
from benchmarks.megatron_throughput import emit, log
from launcher.compose import compose
from model.megatron import full_logits, pack_lengths
from model.megatron.parity import kl_and_dlogp
from tests.gpu.megatron_setup import build_hf_on_gpu, init_distributed, megatron_from_hf_model

SITES = {"hc_merge": [layer_module], "_coefficients": [mhc_module], "_collapse": [mhc_module],
         "rms_norm": [rmsnorm_module], "_swiglu": [mlp_module], "_combine": [moe_module],
         "_log_decay": [kda_module], "_gated_norm": [kda_module]}
"""Each fused function and the modules that call it by its global name."""


def hf_merge(post_TN, comb_TNN, out_TD, residual_TND):
    """HF's hc_merge: a batched 4 x 4 matmul per token (bf16 in, bf16 out)."""
    dtype = residual_TND.dtype
    mixed_TND = torch.matmul(comb_TNN.to(dtype).transpose(-1, -2), residual_TND)
    return post_TN.to(dtype).unsqueeze(-1) * out_TD.unsqueeze(-2) + mixed_TND


@contextlib.contextmanager
def eager(names: list[str], bmm_merge: bool):
    """Run the named fused functions eagerly (and hc_merge as HF's batched matmul)."""
    saved = []
    for name in names:
        for module in SITES[name]:
            saved.append((module, name, getattr(module, name)))
            setattr(module, name, getattr(module, name).__wrapped__)
    if bmm_merge:
        saved.append((layer_module, "hc_merge", layer_module.hc_merge))
        layer_module.hc_merge = hf_merge
    try:
        yield
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


def run(model_name: str, seq_len: int, device_type: str) -> dict:
    device = init_distributed(device_type=device_type)
    cfg = compose([f"model={model_name}"]).config
    ids_T = torch.randint(0, cfg.model.arch.vocab_size, (seq_len,), device=device,
                          generator=torch.Generator(device=device).manual_seed(7))
    hf = build_hf_on_gpu(cfg.model, seed=0, device=device)
    with torch.no_grad():
        ref = hf(input_ids=ids_T[None], use_cache=False).logits[0, :-1]
    meg = megatron_from_hf_model(hf, cfg.model, device)
    del hf
    torch.cuda.empty_cache()
    packed, targets = pack_lengths([seq_len], device), ids_T[1:]
    variants = {"all_fused": ([], False), "all_eager": (list(SITES), False),
                "all_eager_bmm_merge": (list(SITES), True), "all_fused_bmm_merge": ([], True)}
    variants.update({f"bmm_merge_only_fused_{name}": ([n for n in SITES if n != name], True)
                     for name in SITES if name != "hc_merge"})
    out = {}
    for label, (names, hf_order) in variants.items():
        with eager(names, hf_order), torch.no_grad():
            out[label] = kl_and_dlogp(ref, full_logits(meg(ids_T, packed))[:-1], targets)
        log(label, out[label])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="glm5_3_flash_4layer")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the script (everything is eager there)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    emit(run(args.model, args.tokens, args.device), args.out)


if __name__ == "__main__":
    main()
