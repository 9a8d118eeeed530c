"""Where does the packed-batch gap come from? (H200, 4-layer slice)

The packed forward runs fla's varlen chunk_kda (cu_seqlens); HF runs each sequence with the
fixed-length kernel. This runs the SAME single 4096-token sequence through Megatron twice,
with the fixed-length and with the varlen kernel (cu_seqlens = [0, 4096]), and compares both
with HF: if the varlen run alone moves KL(HF || Megatron) to the packed level, the packed gap
is that kernel's rounding, amplified by the random 4-layer network, not a packing error.
With --segments it instead compares, per sequence of the packed batch, HF (one sequence at
a time), Megatron one sequence at a time, and Megatron packed; --per-seq-kda makes the packed
run call the fixed-length kernel per sequence instead of the varlen one.

    PYTHONPATH=. python benchmarks/investigations/megatron_varlen_floor.py
"""
import json

import torch

import model.megatron.kda_ops as kda_ops
from benchmarks.harness.megatron_setup import build_hf_on_gpu, init_distributed, megatron_from_hf_model
from benchmarks.harness.parity import kl_and_dlogp
from launcher.config.compose import compose
from model.megatron import full_logits, pack_lengths


def varlen_kda(q_THK, k_THK, v_THV, g_THK, beta_TH, packed):
    """kda_fla, but with cu_seqlens even for one sequence (the packed path's kernel)."""
    from fla.ops.kda import chunk_kda

    out, _ = chunk_kda(q_THK[None], k_THK[None], v_THV[None], g_THK[None], beta_TH[None],
                       use_qk_l2norm_in_kernel=True, cu_seqlens=packed.cu_seqlens.long())
    return out[0]


LENGTHS = [2560, 1024, 512]


def segments(meg, ref_per_seq, ids_T, device) -> dict:
    """Per packed sequence: KL of HF vs Megatron-per-sequence, vs Megatron-packed, and between the two."""
    with torch.no_grad():
        per_seq = [full_logits(meg(s, pack_lengths([len(s)], device))) for s in ids_T.split(LENGTHS)]
        packed = full_logits(meg(ids_T, pack_lengths(LENGTHS, device))).split(LENGTHS)
    out = {}
    for i, (s, ref, one, pk) in enumerate(zip(ids_T.split(LENGTHS), ref_per_seq, per_seq, packed, strict=True)):
        t = s.roll(-1)
        out[f"seq{i}_len{len(s)}"] = {"hf_vs_meg_alone": kl_and_dlogp(ref, one, t)["kl_per_token"],
                                       "hf_vs_meg_packed": kl_and_dlogp(ref, pk, t)["kl_per_token"],
                                       "meg_alone_vs_packed": kl_and_dlogp(one, pk, t)["kl_per_token"]}
    return out


def per_sequence_kda(q_THK, k_THK, v_THV, g_THK, beta_TH, packed):
    """kda_fla one sequence at a time with the fixed-length kernel (no cu_seqlens)."""
    from fla.ops.kda import chunk_kda

    outs = []
    for start, end in packed.bounds:
        out, _ = chunk_kda(*(t[start:end][None] for t in (q_THK, k_THK, v_THV, g_THK, beta_TH)),
                           use_qk_l2norm_in_kernel=True)
        outs.append(out[0])
    return torch.cat(outs)


def main() -> None:
    import sys

    device = init_distributed()
    cfg = compose(["model=glm5_3_flash_4layer"]).config
    ids_T = torch.randint(0, cfg.model.arch.vocab_size, (4096,), device=device,
                          generator=torch.Generator(device=device).manual_seed(7))
    hf = build_hf_on_gpu(cfg.model, seed=0, device=device).eval()
    with torch.no_grad():
        ref = hf(input_ids=ids_T[None], use_cache=False).logits[0]
        ref_per_seq = [hf(input_ids=s[None], use_cache=False).logits[0] for s in ids_T.split(LENGTHS)]
    meg = megatron_from_hf_model(hf, cfg.model, device)
    del hf
    if "--per-seq-kda" in sys.argv:
        kda_ops.kda_fla = per_sequence_kda
    if "--segments" in sys.argv:
        print(json.dumps(segments(meg, ref_per_seq, ids_T, device), indent=1))
        return
    single = pack_lengths([4096], device)
    targets = ids_T.roll(-1)
    with torch.no_grad():
        fixed = full_logits(meg(ids_T, single))
        kda_ops.kda_fla = varlen_kda
        varlen = full_logits(meg(ids_T, single))
    result = {"hf_vs_megatron_fixed_len_kernel": kl_and_dlogp(ref, fixed, targets),
              "hf_vs_megatron_varlen_kernel": kl_and_dlogp(ref, varlen, targets),
              "megatron_fixed_vs_varlen": kl_and_dlogp(fixed, varlen, targets)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
