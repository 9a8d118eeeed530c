"""Weight sync per step: bytes shipped to the engines and the time over the relevant link.

Merged sync ships every parameter in the model dtype to every engine; adapter sync ships
the LoRA tensors only. hf engines take buckets staged through host memory; other colocated
engines receive over NVLink (CUDA IPC; intra-node link of each GPU, all GPUs of an engine
in parallel). Async engines receive over the network, limited by
both the trainer nodes' NICs (all engines' copies leave through them) and the engine's own.
"""
from dataclasses import dataclass

from launcher.plan._memory_trainer import DTYPE_BYTES, GIB
from launcher.plan.lora import LoraPlan
from launcher.plan.params import ParamCounts
from launcher.schema.root import LauncherConfig

SYNC_BUCKET_GIB = 1.0
SYNC_BUCKET_OVERHEAD_S = 0.05
"""Per bucket: gather across trainer ranks, IPC/NCCL handle exchange, the engine's load_weights."""
NETWORK_EFFICIENCY = 0.25
"""Share of NIC line rate a trainer-to-engine broadcast sustains (many small tensors, one hop)."""
HOST_STAGED_GIB_PER_S = 1.0
"""Engines without a GPU transfer (the hf backend) get buckets staged through host memory:
gather, device -> pageable host copy, host -> device load. Measured on 2 H200s (TP2
megatron trainer -> hf engine, 4-layer slice, benchmarks/colocated_sync.py): 44.3 GiB in
47.1 s and 41.7 s (0.94, 1.06 GiB/s), in one process; Ray's object store adds to it."""


@dataclass
class SyncPlan:
    kind: str
    """merged | adapter | full (full fine-tuning ships the whole model, like merged)."""
    bytes_per_engine: int
    gib_per_engine: float
    link: str
    seconds: float


def plan_sync(cfg: LauncherConfig, params: ParamCounts, lora: LoraPlan, trainer_gpus: int) -> SyncPlan:
    dtype = DTYPE_BYTES[cfg.model.dtype.value]
    if lora.rank > 0 and not cfg.trainer.lora.merge:
        kind, nbytes = "adapter", lora.params_total * dtype
    else:
        kind, nbytes = ("merged" if lora.rank > 0 else "full"), params.total * dtype
    inf, links = cfg.inference, cfg.cluster.links
    buckets = max(nbytes / GIB / SYNC_BUCKET_GIB, 1.0) * SYNC_BUCKET_OVERHEAD_S
    if inf.backend.value == "hf":
        link, wire = "host_staged", nbytes / (HOST_STAGED_GIB_PER_S * GIB)
    elif cfg.placement.mode.value == "colocated":
        link, wire = "intra_node", nbytes * 8 / (inf.tp * links.intra_node_gbps * 1e9)
    else:
        rate = links.inter_node_gbps * 1e9 * NETWORK_EFFICIENCY
        receive = nbytes * 8 / (inf.tp * rate)
        send = inf.engines * nbytes * 8 / (max(trainer_gpus, 1) * rate)
        link, wire = "inter_node", max(receive, send)
    seconds = wire + buckets
    return SyncPlan(kind=kind, bytes_per_engine=int(nbytes), gib_per_engine=nbytes / GIB, link=link, seconds=seconds)
