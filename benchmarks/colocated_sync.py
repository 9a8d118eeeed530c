"""Issue 8: a colocated weight-sync round trip on the same GPUs, against the planner.

    PYTHONPATH=. torchrun --nproc-per-node 2 benchmarks/colocated_sync.py --out sync.json
    smoke test (CPU, gloo):  PYTHONPATH=. torchrun --nproc-per-node 1 benchmarks/colocated_sync.py \
        --device cpu --model tiny --tp 1

The `megatron` trainer backend (TP over the GPUs, LoRA on the attention projections) streams
its weights in the planner's buckets to an `hf` engine on GPU 0 through the product's
protocol: begin_export / next_bucket on every trainer rank (each bucket a gather across
the mesh), begin_weight_update / load_weight_bucket / finish_weight_update on the engine
(launcher/weight_sync/pump.sync_in_process: what the driver does, minus the Ray hop).
Timed: a merged sync, the first adapter sync (frozen base first) and a steady adapter
sync, each against plan.sync.seconds of the same config. The engine's logits after the
merged sync, and after adapter syncs of moved adapters, are compared with the trainer's
(KL), so the right tensors are known to land.
"""
import argparse
import time

import torch
import torch.distributed as dist

from benchmarks.megatron_throughput import emit, lora_overrides
from device.harness.megatron_setup import DOMAIN_LORA_TARGETS, init_distributed
from device.harness.parity import kl_and_dlogp
from launcher.config.compose import compose
from launcher.contract.spec import ActorSpec
from launcher.plan import make_plan
from launcher.weight_sync.pump import sync_in_process
from launcher.workers.hf.engine import HfEngine
from launcher.workers.megatron.trainer import MegatronTrainer
from model.megatron import full_logits, pack_lengths

TARGETS = [t for t in DOMAIN_LORA_TARGETS if t not in ("linear_fc1", "linear_fc2")]
"""Attention projections only: the hf engine's peft model has no routed-expert adapters
(fused 3-D expert weights), so an expert adapter could not land there."""


def overrides(args, world: int, merge: bool) -> list[str]:
    cluster = "cluster=h200x1" if args.device == "cuda" else "cluster=local"
    return [f"model={args.model}", cluster, f"cluster.gpus_per_node={world}", "trainer.backend=megatron",
            f"trainer.mesh.tp={args.tp}", f"trainer.mesh.sequence_parallel={str(args.tp > 1).lower()}",
            "inference.backend=hf", "inference.engines=1", "inference.tp=1", "placement.mode=colocated",
            f"trainer.lora.merge={str(merge).lower()}", *lora_overrides(TARGETS)]


def timed_sync(trainer, engines, version: int, with_base: bool, device) -> dict:
    """Wall seconds of one streamed sync on every rank (rank 0 feeds the engine)."""
    dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    sent = sync_in_process(trainer, engines, version, with_base)
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    return {"seconds": time.perf_counter() - start, "buckets": len(sent), "gib": sum(b.nbytes for b in sent) / 2**30}


def engine_kl(trainer, engine, ids_T, device) -> dict:
    """KL(trainer || engine) per token on one sequence (a collective for the trainer's logits)."""
    with torch.no_grad():
        trainer_TV = full_logits(trainer.model(ids_T, pack_lengths([len(ids_T)], device)))
        if engine is None:
            return {}
        engine_TV = engine.model(input_ids=ids_T[None].to(engine.device), use_cache=False).logits[0]
    return kl_and_dlogp(trainer_TV.float(), engine_TV.float().to(trainer_TV.device), ids_T.roll(-1))


def move_adapters(model) -> None:
    """lora_B off zero, the same draw on every rank (duplicated shards must agree), so the
    adapter changes the logits and the engine must apply it to match the trainer."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("lora_B"):
                param.normal_(0.0, 0.02)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="glm5_3_flash_4layer")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = init_distributed(device_type=args.device)
    rank, world = dist.get_rank(), dist.get_world_size()
    merged_cfg = compose(overrides(args, world, merge=True)).config
    trainer = MegatronTrainer(ActorSpec.planned(merged_cfg, rank, world))
    trainer.init_distributed("127.0.0.1", 0)
    engine = None
    if rank == 0:
        with torch.device(device):
            engine = HfEngine(ActorSpec.planned(merged_cfg, 0))
    engines = [engine] if engine is not None else []
    ids_T = torch.randint(0, merged_cfg.model.arch.vocab_size, (512,), device=device,
                          generator=torch.Generator(device=device).manual_seed(5))
    result = {"kl_before_sync": engine_kl(trainer, engine, ids_T, device)}
    result["merged"] = timed_sync(trainer, engines, 1, with_base=False, device=device)
    result["kl_after_merged_sync"] = engine_kl(trainer, engine, ids_T, device)
    trainer.cfg = compose(overrides(args, world, merge=False)).config
    move_adapters(trainer.model)
    result["kl_adapters_moved_before_sync"] = engine_kl(trainer, engine, ids_T, device)
    result["adapter_first"] = timed_sync(trainer, engines, 2, with_base=True, device=device)
    result["adapter"] = timed_sync(trainer, engines, 3, with_base=False, device=device)
    result["kl_after_adapter_sync"] = engine_kl(trainer, engine, ids_T, device)
    for kind, merge in (("merged", True), ("adapter", False)):
        result[f"planner_{kind}_s"] = make_plan(compose(overrides(args, world, merge)).config).sync.seconds
    result["merged"]["over_planner"] = result["merged"]["seconds"] / result["planner_merged_s"]
    result["adapter"]["over_planner"] = result["adapter"]["seconds"] / result["planner_adapter_s"]
    if rank == 0:
        emit(result, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
