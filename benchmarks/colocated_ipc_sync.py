"""Issue 17: a colocated merged weight sync on ONE GPU, host staging against CUDA IPC, with the planner.

    PYTHONPATH=. python benchmarks/colocated_ipc_sync.py --out docs/results/colocated_ipc_sync_h200x1.json
    smoke test (CPU, host transport only):  PYTHONPATH=. python benchmarks/colocated_ipc_sync.py --device cpu --model tiny

Trainer rank 0 (`megatron` backend, world 1, LoRA on the attention projections, merged) runs in
this process and an `hf` engine in a second one on the same GPU (device/harness/engine_process.py:
torch.multiprocessing spawn; the GPU machine has no Ray), with the product's driver between
them (launcher/weight_sync/pump.stream_weights: two buckets in flight, release after finish).
Per transport: the adapters move (new merged weights), the engine's KL to the trainer is
measured, the sync is timed, and the KL is measured again: a small KL after proves the right
tensors landed. Printed: GiB moved, seconds, GB/s, the plan's estimate for that transport.
"""
import argparse
import time

import torch

from benchmarks.colocated_sync import TARGETS
from benchmarks.megatron_throughput import emit, log, lora_overrides
from device.harness.engine_process import EngineProcess, LocalTrainers
from device.harness.megatron_setup import init_distributed
from launcher.config.compose import compose
from launcher.contract.spec import ActorSpec
from launcher.plan import make_plan
from launcher.plan.sync import BUCKET_BYTES, SyncTransport, bucketed_seconds
from launcher.weight_sync.pump import stream_weights
from launcher.workers.megatron.trainer import MegatronTrainer
from model.megatron import full_logits, pack_lengths

GIB = 2**30


def overrides(args) -> list[str]:
    cluster = "cluster=h200x1" if args.device == "cuda" else "cluster=local"
    return ["recipe=tiny_grpo", f"model={args.model}", cluster, "cluster.gpus_per_node=1", "trainer.backend=megatron",
            "trainer.mesh.tp=1", "inference.backend=hf", "inference.engines=1", "inference.tp=1",
            "placement.mode=colocated", "trainer.lora.merge=true", *lora_overrides(TARGETS)]


def move_adapters(model, seed: int) -> None:
    """lora_B off its current values, so the merged weights (and logits) change before each sync."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("lora_B"):
                param.normal_(0.0, 0.02)


def engine_kl(trainer, engine: EngineProcess, ids_T: torch.Tensor) -> float:
    with torch.no_grad():
        trainer_TV = full_logits(trainer.model(ids_T, pack_lengths([len(ids_T)], ids_T.device))).float()
    return engine.call("kl", ids_T.cpu(), trainer_TV.cpu())["kl_per_token"]


def timed_sync(trainer, engine: EngineProcess, transport: str, version: int, device) -> dict:
    trainers = LocalTrainers(trainer, transport)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    stats = stream_weights(trainers, engine, version, with_base=False, wait=True, max_bucket_bytes=BUCKET_BYTES)
    seconds = time.perf_counter() - start
    held = trainers.held_at_release - torch.cuda.memory_allocated() if device.type == "cuda" else 0
    return {"seconds": seconds, "buckets": stats.buckets, "gib": stats.nbytes / GIB,
            "gb_per_s": stats.nbytes / seconds / 1e9, "held_until_release_gib": held / GIB}


def table(rows: list[dict]) -> str:
    head = f"{'transport':<10}{'GiB':>8}{'buckets':>9}{'seconds':>9}{'GB/s':>8}{'plan s':>9}{'KL before':>11}{'KL after':>10}"
    lines = [head] + [f"{r['transport']:<10}{r['gib']:>8.2f}{r['buckets']:>9}{r['seconds']:>9.2f}{r['gb_per_s']:>8.2f}"
                      f"{r['plan_s']:>9.2f}{r['kl_before']:>11.4f}{r['kl_after']:>10.4f}" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="glm5_3_flash_4layer")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--transports", default=f"{SyncTransport.host},{SyncTransport.cuda_ipc}",
                        help="comma-separated, in order; on --device cpu only host runs (CUDA IPC is GPU-only)")
    parser.add_argument("--tokens", type=int, default=512, help="sequence length of the KL check")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    transports = [SyncTransport(t) for t in args.transports.split(",")] if args.device == "cuda" else [SyncTransport.host]
    device = init_distributed(device_type=args.device)
    cfg = compose(overrides(args)).config
    plan = make_plan(cfg)
    engine = EngineProcess(overrides(args))  # builds beside the trainer
    trainer = MegatronTrainer(ActorSpec.planned(cfg, 0, 1))
    trainer.init_distributed("127.0.0.1", 0)
    log("trainer built", {"plan_transport": plan.sync.transport, "plan_gib": plan.sync.gib_per_engine})
    engine.wait_started()
    log("engine built", {"pid": engine.process.pid})
    ids_T = torch.randint(0, cfg.model.arch.vocab_size, (args.tokens,), device=device,
                          generator=torch.Generator(device=device).manual_seed(5))
    # The engine builds empty (its weights come by sync): a first sync gives it the trainer's.
    stream_weights(LocalTrainers(trainer, transports[0]), engine, 0, with_base=False, wait=True,
                   max_bucket_bytes=BUCKET_BYTES)
    rows = []
    for version, transport in enumerate(transports, start=1):
        move_adapters(trainer.model, seed=version)
        row = {"transport": transport, "kl_before": engine_kl(trainer, engine, ids_T)}
        log(f"{transport} kl before", row["kl_before"])
        row.update(timed_sync(trainer, engine, transport, version, device))
        row["kl_after"] = engine_kl(trainer, engine, ids_T)
        row["plan_s"] = bucketed_seconds(plan.sync.bytes_per_engine, transport)
        rows.append(row)
        log(transport, row)
    engine.close()
    print(table(rows), flush=True)
    emit({"model": args.model, "device": args.device, "plan_transport": plan.sync.transport,
          "plan_gib": plan.sync.gib_per_engine, "plan_seconds": plan.sync.seconds, "rows": rows}, args.out)


if __name__ == "__main__":
    main()
