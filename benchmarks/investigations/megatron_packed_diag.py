"""Where does packing change the Megatron model's bf16 output? (issue 6: packed-batch KL)

    PYTHONPATH=. python benchmarks/investigations/megatron_packed_diag.py --out packed_diag.json

On CPU in fp32 a sequence gives the same logits alone and packed with others (max |diff|
3e-7, KL 1e-9: the masks and per-sequence loops are right). On the H200 in bf16 the 4-layer
slice's KL(alone || packed) was 0.0145 for every sequence, the first one included, ten
times the HF-vs-Megatron KL of one sequence. A causal model sees nothing of later
sequences, so only batch-shape-dependent arithmetic can move the first one. This runs the
first sequence alone and packed, records every sub-module's output on its tokens, and
prints where the relative error first jumps and how many tokens change their experts; then
repeats the logits comparison with cuBLAS's reduced-precision bf16 reductions turned off.
`hf_shape_floor` is the same comparison for HF glm5_next (one sequence vs a longer one).
"""
import argparse

import torch

from benchmarks.harness.megatron_setup import build_hf_on_gpu, init_distributed, megatron_from_hf_model
from benchmarks.harness.parity import kl_and_dlogp
from benchmarks.megatron_throughput import emit
from launcher.config.compose import compose
from model.megatron import full_logits, pack_lengths
from model.megatron.moe import MoE

LENGTHS = [2560, 1024, 512]


def record(model, first: int) -> tuple[dict, list]:
    """Hooks: every layer's sub-module outputs and every MoE's experts (first `first` rows)."""
    outputs, handles = {}, []

    def keep(name):
        def hook(module, args, out):
            if isinstance(module, MoE):
                outputs[f"{name}.experts"] = module.route(args[0])[1][:first].sort(-1).values
            outputs[name] = (out[-1] if isinstance(out, tuple) else out)[:first].float()
        return hook

    for i, layer in enumerate(model.layers):
        for sub in ("self_attention", "mlp", "attn_hc", "ffn_hc", "input_layernorm", "pre_mlp_layernorm"):
            handles.append(getattr(layer, sub).register_forward_hook(keep(f"layers.{i}.{sub}")))
        handles.append(layer.register_forward_hook(keep(f"layers.{i}")))
    return outputs, handles


def compare(alone: dict, packed: dict) -> dict:
    rows = {}
    for name, a in alone.items():
        b = packed[name]
        if name.endswith(".experts"):
            rows[name] = {"tokens_rerouted": (a != b).any(-1).float().mean().item()}
        else:
            rows[name] = {"rel_err": ((a - b).norm() / a.norm().clamp_min(1e-30)).item()}
    return rows


def logits_kl(meg, ids_T, device) -> dict:
    first = LENGTHS[0]
    with torch.no_grad():
        alone = full_logits(meg(ids_T[:first], pack_lengths([first], device)))
        packed = full_logits(meg(ids_T, pack_lengths(LENGTHS, device)))[:first]
    return kl_and_dlogp(alone, packed, ids_T[:first].roll(-1))


def shape_floor(hf, ids_T) -> dict:
    """HF against itself: the first sequence alone, and as the start of one longer sequence.
    Causality makes them equal in exact arithmetic; in bf16 only the batch shape differs, so
    this is the KL any implementation of the model shows when only shapes change."""
    first = LENGTHS[0]
    with torch.no_grad():
        alone = hf(input_ids=ids_T[None, :first], use_cache=False).logits[0]
        longer = hf(input_ids=ids_T[None], use_cache=False).logits[0, :first]
    return kl_and_dlogp(alone, longer, ids_T[:first].roll(-1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="glm5_3_flash_4layer")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: smoke test (tiny model)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = init_distributed(device_type=args.device)
    cfg = compose([f"model={args.model}"]).config
    ids_T = torch.randint(0, cfg.model.arch.vocab_size, (sum(LENGTHS),), device=device,
                          generator=torch.Generator(device=device).manual_seed(7))
    hf = build_hf_on_gpu(cfg.model, seed=0, device=device)
    meg = megatron_from_hf_model(hf, cfg.model, device)
    result = {"hf_shape_floor": shape_floor(hf, ids_T), "default_kl_first_seq": logits_kl(meg, ids_T, device)}
    del hf
    with torch.no_grad():
        alone, handles = record(meg, LENGTHS[0])
        meg(ids_T[: LENGTHS[0]], pack_lengths(LENGTHS[:1], device))
        for h in handles:
            h.remove()
        packed, handles = record(meg, LENGTHS[0])
        meg(ids_T, pack_lengths(LENGTHS, device))
        for h in handles:
            h.remove()
    result["modules"] = compare(alone, packed)
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    result["no_reduced_precision_kl_first_seq"] = logits_kl(meg, ids_T, device)
    emit(result, args.out)


if __name__ == "__main__":
    main()
