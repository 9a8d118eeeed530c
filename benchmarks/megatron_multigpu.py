"""Issue 8: Megatron meshes on 2 GPUs (DP2, EP2 ETP1, TP2, TP2+EP2) against one-GPU HF.

    PYTHONPATH=. torchrun --nproc-per-node 2 benchmarks/megatron_multigpu.py --out multigpu.jsonl
    smoke test (CPU, gloo):  ... --device cpu --model tiny --tokens 256

Per mesh, on every rank: KL(HF || Megatron) and |dlogp| on one sequence (every DP replica
runs it); the LoRA B-gradient cosine against HF's full-weight gradient (lora_B = 0, so
dL/dB = s G A^T); then LoRA training steps through Megatron's DDP and distributed optimizer
(GPU only): step time, peak memory per GPU against the planner, tokens/s per GPU, and the
cost model's training seconds for the same tokens (launcher/search/cost.py). The one-GPU
figure is DP2's forward+backward before DDP wraps it: no collective runs there, so it is
exactly one GPU's work. Meshes that keep the one-GPU kernel shapes run first (TP halves the
KDA heads, which costs fresh Triton compiles). One JSON line per mesh as soon as it ends.
"""
import argparse
import gc
import json
import time
from functools import partial

import torch
import torch.distributed as dist
from megatron.core import parallel_state as ps

from benchmarks.megatron_throughput import LORA_ALPHA, LORA_RANK, lora_overrides, meg_loss, timed
from device.harness.megatron_setup import (
    DOMAIN_LORA_TARGETS,
    build_hf_on_gpu,
    expected_b_grads,
    hf_grads,
    init_distributed,
    megatron_from_hf_model,
)
from device.harness.parity import cosine, kl_and_dlogp
from launcher.config.compose import compose
from launcher.plan import make_plan
from launcher.search.cost import estimate_step
from model.megatron import full_logits, pack_lengths
from model.megatron.lora import apply_lora
from model.megatron.optim import sum_grads_without_ddp, train_step, wrap_for_training
from model.megatron.shards import gather_full, shard_of
from model.megatron.spec import ModelSpec

MESHES = {"dp2": (1, 1, 1), "ep2_etp1": (1, 2, 1), "etp2": (1, 1, 2), "tp2": (2, 1, 1), "tp2_ep2": (2, 2, 1)}
TRAIN_SHARE_OF_COMPUTE = 6 / 8
"""The cost model's compute is log-prob pass (2) + training (6) x active x tokens."""


def reference(model_cfg, device, ids_T):
    """HF logits and the expected LoRA grads on this GPU, then the HF weights on the host."""
    hf = build_hf_on_gpu(model_cfg, seed=0, device=device)
    loss = torch.nn.functional.cross_entropy(hf(input_ids=ids_T[None], use_cache=False).logits[0, :-1].float(),
                                             ids_T[1:])
    loss.backward()
    with torch.no_grad():
        logits = hf(input_ids=ids_T[None], use_cache=False).logits[0].cpu()
    spec = ModelSpec.from_arch(model_cfg.arch, model_cfg.dtype, pad_token_id=0)
    a_values, want_dB = expected_b_grads(spec, hf_grads(hf), DOMAIN_LORA_TARGETS, LORA_RANK,
                                         LORA_RANK // model_cfg.arch.num_experts_per_tok, LORA_ALPHA, seed=11)
    hf.zero_grad(set_to_none=True)
    return hf.cpu(), logits, {k: v.cpu() for k, v in a_values.items()}, {k: v.cpu() for k, v in want_dB.items()}


def lora_grad_cosines(meg, a_values, want_dB, ids_T, single, device) -> dict:
    """Per-adapter cosine of dL/dB against HF's, grads summed over the groups DDP reduces
    them in (DP replicas all run the same tokens: a uniform scale, cosine ignores it).
    Routed-expert adapters are reported apart: their grads follow the routing, which bf16
    noise flips for near-tied tokens of a randomly initialised router."""
    params = dict(meg.named_parameters())
    with torch.no_grad():
        for pname, value in a_values.items():
            params[pname].copy_(shard_of(value.to(device), params[pname]))
    meg_loss(meg, ids_T, single).backward()
    sum_grads_without_ddp(meg)
    cosines = {}
    for name, want in want_dB.items():
        got = gather_full(params[name], params[name].grad).float()
        if want.abs().sum() > 0:
            cosines[name] = cosine(got, want.to(device))
    meg.zero_grad(set_to_none=True)
    routed = {n: c for n, c in cosines.items() if ".mlp.experts." in n}
    dense = {n: c for n, c in cosines.items() if n not in routed}
    return {"lora_grad_cosine_min": min(cosines.values()), "lora_grad_cosine_min_dense": min(dense.values()),
            "lora_grad_cosine_min_routed": min(routed.values(), default=None),
            "lora_grad_worst": sorted(cosines, key=cosines.get)[:3]}


def fwd_bwd(meg, ids_T, single) -> None:
    meg.zero_grad(set_to_none=False)
    meg_loss(meg, ids_T, single).backward()


def training_steps(meg, ids_T, single, device, iters: int) -> dict:
    """LoRA steps as the trainer backend takes them: Megatron DDP + distributed optimizer on
    GPU, summed grads + plain Adam on CPU (Megatron's DDP needs CUDA). The allocator's cache
    is emptied first: the peak is then this mesh's training, not the HF reference's leftovers."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        ddp, optimizer = wrap_for_training(meg, lr=1e-5, weight_decay=0.0, grad_clip=1.0)
        step = partial(train_step, ddp, optimizer, [partial(meg_loss, ddp, ids_T, single)])
    else:
        optimizer = torch.optim.Adam([p for p in meg.parameters() if p.requires_grad], lr=1e-5)

        def step():
            fwd_bwd(meg, ids_T, single)
            sum_grads_without_ddp(meg)
            optimizer.step()
    step_s = timed(step, iters, device)
    if device.type != "cuda":
        return {"step_s": step_s, "peak_reserved_gib": 0.0}
    return {"step_s": step_s, "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
            "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}


def planner_overrides(model_name: str, mesh: tuple[int, int, int], tokens: int, world: int) -> list[str]:
    tp, ep, etp = mesh
    return [f"model={model_name}", "cluster=h200x1", f"cluster.gpus_per_node={world}", "trainer.backend=megatron",
            f"trainer.mesh.tp={tp}", f"trainer.mesh.ep={ep}", f"trainer.mesh.etp={etp}",
            f"trainer.mesh.sequence_parallel={str(tp > 1).lower()}", f"trainer.max_tokens_per_microbatch={tokens}",
            *lora_overrides()]


def planner_view(model_name: str, mesh, tokens: int, world: int) -> dict:
    """The planner's trainer memory per GPU and the cost model's seconds for this step's tokens
    (tokens on each of dp ranks; the model's step has tokens_per_step)."""
    cfg = compose(planner_overrides(model_name, mesh, tokens, world)).config
    plan = make_plan(cfg)
    est = estimate_step(cfg, plan)
    share = tokens * (plan.mesh.dp or 1) / plan.batch.tokens_per_step
    minis = max(plan.batch.mini_batches_per_step or 1, 1)
    train_s = (est.compute_s * TRAIN_SHARE_OF_COMPUTE + est.tp_comm_s + est.moe_comm_s) * share + est.dp_comm_s / minis
    return {"planner_gib": plan.memory.trainer.total_gib, "cost_model_train_s": train_s}


def run_mesh(name, mesh, args, model_cfg, ref, ids_T, device) -> dict:
    hf_cpu, ref_logits, a_values, want_dB = ref
    init_distributed(*mesh, device_type=device.type)
    meg = megatron_from_hf_model(hf_cpu, model_cfg, device)
    single = pack_lengths([len(ids_T)], device)
    with torch.no_grad():
        parity = kl_and_dlogp(ref_logits[:-1].to(device), full_logits(meg(ids_T, single))[:-1], ids_T[1:])
    apply_lora(meg, DOMAIN_LORA_TARGETS, LORA_RANK, LORA_ALPHA,
               expert_rank=LORA_RANK // model_cfg.arch.num_experts_per_tok)
    grad_cos = lora_grad_cosines(meg, a_values, want_dB, ids_T, single, device)
    tp, dp = ps.get_tensor_model_parallel_world_size(), ps.get_data_parallel_world_size()
    fwd_bwd_s = timed(partial(fwd_bwd, meg, ids_T, single), args.iters, device)
    steps = training_steps(meg, ids_T, single, device, args.iters)
    row = {"mesh": name, "tp": tp, "ep": mesh[1], "etp": mesh[2], "dp": dp, "parity": parity,
           **grad_cos, "fwd_bwd_s": fwd_bwd_s,
           "fwd_bwd_tokens_per_s_per_gpu": len(ids_T) / (fwd_bwd_s * tp),
           "step_tokens_per_s_per_gpu": len(ids_T) / (steps["step_s"] * tp), **steps,
           **planner_view(args.model, mesh, len(ids_T), dist.get_world_size())}
    if row["peak_reserved_gib"]:
        row["measured_over_planner"] = row["peak_reserved_gib"] / row["planner_gib"]
    row["measured_over_cost_model"] = steps["step_s"] / row["cost_model_train_s"]
    return row


def report(row: dict, out: str | None) -> None:
    if dist.get_rank() != 0:
        return
    print(f"[{time.strftime('%H:%M:%S')}] {json.dumps(row)}", flush=True)
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="glm5_3_flash_4layer")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--meshes", default=",".join(MESHES), help="comma-separated names from MESHES")
    parser.add_argument("--out", default=None, help="JSON lines, one per mesh (appended)")
    args = parser.parse_args()
    device = init_distributed(device_type=args.device)
    model_cfg = compose([f"model={args.model}"]).config.model
    gen = torch.Generator(device=device).manual_seed(7)
    ids_T = torch.randint(0, model_cfg.arch.vocab_size, (args.tokens,), device=device, generator=gen)
    ref = reference(model_cfg, device, ids_T)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    report({"stage": "reference done"}, None)
    for name in args.meshes.split(","):
        row = run_mesh(name, MESHES[name], args, model_cfg, ref, ids_T, device)
        if name == "dp2":
            row["one_gpu_tokens_per_s"] = len(ids_T) / row["fwd_bwd_s"]
        report(row, args.out)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
