"""Issue 8: the 4-layer slice on 2 GPUs (TP2, EP2 ETP1, TP2+EP2, DP2) against one-GPU HF.

    torchrun --nproc-per-node 2 benchmarks/megatron_multigpu.py --out multigpu.json   (PYTHONPATH=.)

Per mesh: KL(HF || Megatron) and |dlogp| on one 4096-token sequence (every DP replica runs
it), LoRA B-gradient cosine against HF's full-weight gradient (lora_B = 0, so dL/dB = s G A^T),
peak memory per GPU against the planner, and LoRA fwd+bwd tokens/s per GPU. The HF
reference runs once per GPU before any mesh (so expected gradients are shared by all meshes).
Written after the one-GPU runs; NOT yet run on two GPUs (device budget) - expect fixes.
"""
import argparse
import json
import time
from functools import partial

import torch
import torch.distributed as dist
from megatron.core import parallel_state as ps

from benchmarks.megatron_throughput import DOMAIN_LORA_TARGETS, LORA_ALPHA, LORA_RANK, meg_loss, timed, train_step
from launcher.compose import compose
from launcher.plan import make_plan
from model.megatron import full_logits, pack_lengths
from model.megatron.lora import apply_lora
from model.megatron.parity import cosine, kl_and_dlogp
from model.megatron.shards import gather_full, shard_of
from model.megatron.spec import ModelSpec
from tests.gpu.megatron_setup import build_hf_on_gpu, expected_b_grads, hf_grads, init_distributed, megatron_from_hf_model

MESHES = {"tp2": (2, 1, 1), "ep2_etp1": (1, 2, 1), "tp2_ep2": (2, 2, 1), "dp2": (1, 1, 1)}


def reference(cfg, device, ids_T):
    """HF logits and the expected LoRA grads (one GPU), then the HF weights on the host."""
    hf = build_hf_on_gpu(cfg.model, seed=0, device=device)
    loss = torch.nn.functional.cross_entropy(hf(input_ids=ids_T[None], use_cache=False).logits[0, :-1].float(),
                                             ids_T[1:])
    loss.backward()
    with torch.no_grad():
        logits = hf(input_ids=ids_T[None], use_cache=False).logits[0]
    spec = ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype, pad_token_id=0)
    a_values, want_dB = expected_b_grads(spec, hf_grads(hf), DOMAIN_LORA_TARGETS, LORA_RANK,
                                         LORA_RANK // cfg.model.arch.num_experts_per_tok, LORA_ALPHA, seed=11)
    hf.zero_grad(set_to_none=True)
    return hf.cpu(), logits, a_values, want_dB


def sum_partial_grads(model) -> None:
    for param in model.parameters():
        if param.grad is None:
            continue
        if getattr(param, "sequence_parallel", False):
            dist.all_reduce(param.grad, group=ps.get_tensor_model_parallel_group())


def run_mesh(name, mesh, cfg, hf_cpu, ref_logits, a_values, want_dB, ids_T, device) -> dict:
    init_distributed(*mesh)
    meg = megatron_from_hf_model(hf_cpu, cfg.model, device)
    single = pack_lengths([len(ids_T)], device)
    with torch.no_grad():
        parity = kl_and_dlogp(ref_logits[:-1].to(device), full_logits(meg(ids_T, single))[:-1], ids_T[1:])
    apply_lora(meg, DOMAIN_LORA_TARGETS, LORA_RANK, LORA_ALPHA, normalize_moe_lora=True,
               topk=cfg.model.arch.num_experts_per_tok)
    params = dict(meg.named_parameters())
    with torch.no_grad():
        for pname, value in a_values.items():
            params[pname].copy_(shard_of(value.to(device), params[pname]))
    torch.cuda.reset_peak_memory_stats()
    meg_loss(meg, ids_T, single).backward()
    sum_partial_grads(meg)
    got = {n: gather_full(params[n], params[n].grad).float() for n in want_dB}
    cos = [cosine(got[n], want_dB[n].to(device)) for n in want_dB if want_dB[n].abs().sum() > 0]
    step_s = timed(partial(train_step, meg, meg_loss, ids_T, single), iters=3)
    plan = make_plan(compose(planner_overrides(cfg, mesh)).config)
    peak = torch.cuda.max_memory_reserved() / 2**30
    return {"mesh": name, "parity": parity, "lora_grad_cosine_min": min(cos),
            "tokens_per_s_per_gpu": len(ids_T) / step_s / dist.get_world_size(),
            "peak_reserved_gib": peak, "planner_gib": plan.memory.trainer.total_gib,
            "measured_over_planner": peak / plan.memory.trainer.total_gib}


def planner_overrides(cfg, mesh) -> list[str]:
    tp, ep, etp = mesh
    return ["model=glm5_3_flash_4layer", "cluster=h200x1", "cluster.gpus_per_node=2", "trainer.backend=megatron",
            f"trainer.mesh.tp={tp}", f"trainer.mesh.ep={ep}", f"trainer.mesh.etp={etp}",
            f"trainer.mesh.sequence_parallel={str(tp > 1).lower()}", "trainer.max_tokens_per_microbatch=4096",
            f"trainer.lora.rank={LORA_RANK}", f"trainer.lora.alpha={LORA_ALPHA}", "trainer.lora.normalize_moe_lora=true",
            f"trainer.lora.targets=[{','.join(DOMAIN_LORA_TARGETS)}]"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = init_distributed()
    cfg = compose(["model=glm5_3_flash_4layer"]).config
    ids_T = torch.randint(0, cfg.model.arch.vocab_size, (4096,), device=device,
                          generator=torch.Generator(device=device).manual_seed(7))
    hf_cpu, ref_logits, a_values, want_dB = reference(cfg, device, ids_T)
    ref_logits = ref_logits.cpu()
    torch.cuda.empty_cache()
    results = []
    for name, mesh in MESHES.items():
        results.append(run_mesh(name, mesh, cfg, hf_cpu, ref_logits, a_values, want_dB, ids_T, device))
        torch.cuda.empty_cache()
        if dist.get_rank() == 0:
            print(f"[{time.strftime('%H:%M:%S')}] {json.dumps(results[-1])}", flush=True)
    if dist.get_rank() == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
