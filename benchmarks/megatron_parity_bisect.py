"""Which fused op moves the Megatron model's bf16 logits off HF's (issue 6).

    PYTHONPATH=. python benchmarks/megatron_parity_bisect.py --model glm5_3_flash_4layer --out bisect.json
    smoke test (CPU):  ... --device cpu --model tiny --tokens 256

On the random-init 4-layer slice an ulp anywhere upstream of a router or the DSA indexer
can flip a top-k choice, so per-token KL to HF measures how bitwise the forward is. One
sequence, HF's logits once; then the Megatron model with every fused function compiled,
with all of them eager, and with one at a time eager; and the mHC coefficient matmul
in HF's order (normalise in fp32, then an fp32 matmul) instead of NormedMix.
"""
import argparse
import contextlib

import torch
import torch.nn.functional as F

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


class HfOrderMix(torch.autograd.Function):
    """HF's coefficient matmul: the streams normalised in fp32, then an fp32 matmul."""

    @staticmethod
    def apply(flat_TF, fn_WF, eps):
        x32 = flat_TF.float()
        return F.linear(x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps), fn_WF.float())


@contextlib.contextmanager
def eager(names: list[str], hf_order_mix: bool):
    saved = []
    for name in names:
        for module in SITES[name]:
            saved.append((module, name, getattr(module, name)))
            setattr(module, name, getattr(module, name).__wrapped__)
    if hf_order_mix:
        saved.append((mhc_module, "NormedMix", mhc_module.NormedMix))
        mhc_module.NormedMix = HfOrderMix
    try:
        yield
    finally:
        for module, name, value in saved:
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
                "all_eager_hf_order_mix": (list(SITES), True), "hf_order_mix": ([], True)}
    variants.update({f"eager_{name}": ([name], False) for name in SITES})
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
