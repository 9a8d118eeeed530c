"""Which fused op moves the Megatron model's bf16 logits off HF's (issue 6).

    PYTHONPATH=. python benchmarks/investigations/megatron_parity_bisect.py --model glm5_3_flash_4layer --out bisect.json
    smoke test (CPU):  ... --device cpu --model tiny --tokens 256

On the random-init 4-layer slice an ulp anywhere upstream of a router or the DSA indexer
can flip a top-k choice, so per-token KL to HF measures how bitwise the forward is. One
sequence, HF's logits once; then the Megatron model with every forward-fused function
compiled, with all of them eager, and with one at a time eager.
`benchmarks/results/megatron_h200_parity_bisect.json` holds this script's runs at commits a5838bf and
04713a7, when the RMS norm, the mHC coefficients, hc_merge and the KDA decay and gated
norm were fused too; those runs are why their forwards are eager now.
"""
import argparse
import contextlib

import torch

import model.megatron.mhc as mhc_module
import model.megatron.mlp as mlp_module
import model.megatron.moe as moe_module
from benchmarks.harness.megatron_setup import build_hf_on_gpu, init_distributed, megatron_from_hf_model
from benchmarks.harness.parity import kl_and_dlogp
from benchmarks.megatron_throughput import emit, log
from launcher.config.compose import compose
from model.megatron import full_logits, pack_lengths

SITES = {"_collapse": mhc_module, "_swiglu": mlp_module, "_combine": moe_module}
"""Each function fused in the forward and the module that calls it by its global name."""


@contextlib.contextmanager
def eager(names: list[str]):
    """Run the named fused functions eagerly."""
    saved = [(SITES[name], name, getattr(SITES[name], name)) for name in names]
    for module, name, wrapper in saved:
        setattr(module, name, wrapper.__wrapped__)
    try:
        yield
    finally:
        for module, name, wrapper in saved:
            setattr(module, name, wrapper)


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
    variants = {"all_fused": [], "all_eager": list(SITES), **{f"eager_{name}": [name] for name in SITES}}
    out = {}
    for label, names in variants.items():
        with eager(names), torch.no_grad():
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
