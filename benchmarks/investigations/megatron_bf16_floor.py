"""Is the bf16 Megatron-vs-HF logit gap implementation error or bf16 noise? (CPU)

Builds a scaled-down GLM-5.3-Flash (every feature, 64 experts top-8, index_topk < length)
and compares three bf16/fp32 pairs on one sequence: HF fp32 vs HF bf16 (HF's own bf16
noise), HF fp32 vs Megatron bf16, and HF bf16 vs Megatron bf16 (what the GPU check measures).
If Megatron bf16 is as close to the fp32 truth as HF bf16 is, the gap between the two bf16
models is noise, not a mapping or math error.

    .venv/bin/python benchmarks/investigations/megatron_bf16_floor.py
"""
import json
import tempfile

import torch
import torch.distributed as dist

from benchmarks.harness.parity import kl_and_dlogp
from launcher.config.compose import compose
from launcher.workers.hf.model import build_model as build_hf
from launcher.workers.hf.model import checkpoint_state
from model.megatron import full_logits, pack_lengths
from model.megatron.build import build_model, init_parallel
from model.megatron.spec import ModelSpec
from model.megatron.weights import load_hf_state

ARCH = ["vocab_size=4096", "hidden_size=512", "intermediate_size=1024", "moe_intermediate_size=128",
        "num_attention_heads=8", "num_key_value_heads=8", "n_routed_experts=64", "num_experts_per_tok=8",
        "q_lora_rank=192", "kv_lora_rank=64", "qk_nope_head_dim=64", "v_head_dim=64", "index_n_heads=8",
        "index_head_dim=32", "index_topk=256", "index_kpool=4", "linear_num_heads=8", "linear_head_dim=64"]
SEQ = 768


def main() -> None:
    store = tempfile.NamedTemporaryFile(prefix="gloo-", delete=False).name
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    init_parallel(1, 1, 1)
    cfg = compose(["model=glm5_3_flash_4layer", "model.dtype=float32"] + [f"model.arch.{a}" for a in ARCH]).config
    hf32 = build_hf(cfg.model, pad_id=0, seed=0).eval()
    ids_T = torch.randint(0, 4096, (SEQ,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref32 = hf32(input_ids=ids_T[None]).logits[0]
        hf16 = hf32.to(torch.bfloat16)
        for name, param in hf16.named_parameters():
            if any(k in name for k in ("conv1d", "dt_bias", "A_log", "hc.base", "hc.scale", "gate.weight")):
                param.data = param.data.float()
        ref16 = hf16(input_ids=ids_T[None]).logits[0]
        meg = build_model(ModelSpec.from_arch(cfg.model.arch, torch.bfloat16), "cpu")
        load_hf_state(meg, checkpoint_state(hf16))
        meg16 = full_logits(meg(ids_T, pack_lengths([SEQ], "cpu")))
    targets = ids_T.roll(-1)
    result = {"hf32_vs_hf16": kl_and_dlogp(ref32, ref16, targets),
              "hf32_vs_megatron16": kl_and_dlogp(ref32, meg16, targets),
              "hf16_vs_megatron16": kl_and_dlogp(ref16, meg16, targets)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
