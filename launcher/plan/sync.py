"""Weight sync per step: what ships, which transport carries it, and its price.

Merged sync ships every parameter in the model dtype to every engine (also to FP8 engines,
inference.weights_dtype fp8: vLLM quantizes each layer as it arrives); adapter sync ships
the LoRA tensors only. The transport (`sync_transport`, a SyncTransport: the code of each
is a plug-in of launcher/weight_sync/transports/ registered under it): hf engines take
buckets; on GPUs, one engine sharing trainer rank 0's GPU maps each bucket's device buffer
by CUDA IPC handle and copies it device to device; otherwise buckets are staged through
host memory. vLLM engines on GPUs take merged weights through vLLM's own transfer engines:
colocated over NVLink (CUDA IPC; intra-node link of each GPU, all GPUs of an engine in
parallel), async over the network (NCCL), limited by both the trainer nodes' NICs (all
engines' copies leave through them) and the engine's own.
"""
from dataclasses import dataclass
from enum import StrEnum

from launcher.config.schema.choices import GpuArch, InferenceBackendName, PlacementMode
from launcher.config.schema.model import ArchConfig
from launcher.config.schema.root import LauncherConfig
from launcher.plan.arch import DSA, KDA, facts
from launcher.plan.lora import LoraPlan
from launcher.plan.memory_trainer import DTYPE_BYTES, GIB
from launcher.plan.params import ParamCounts

SYNC_BUCKET_GIB = 1.0
BUCKET_BYTES = int(SYNC_BUCKET_GIB * GIB)
"""What a trainer packs per bucket. The price above has one overhead per bucket, so the
plan's sync time is that of what runs. Per bucket an engine takes one actor call and one
load_weights call, small next to moving 1 GiB; two buckets in flight fit in host RAM beside
the rest."""
MAX_BUCKETS_ALIVE = 2
"""Buckets in flight: one being loaded by the engines while the trainer builds the next."""
SYNC_BUCKET_OVERHEAD_S = 0.05
"""Per bucket: gather across trainer ranks, IPC/NCCL handle exchange, the engine's load_weights."""
NETWORK_EFFICIENCY = 0.25
"""Share of NIC line rate a trainer-to-engine broadcast sustains (many small tensors, one hop)."""
HOST_STAGED_GIB_PER_S = 1.0
"""Engines without a GPU transfer (the hf backend) get buckets staged through host memory:
gather, device -> pageable host copy, host -> device load. Measured on 2 H200s (TP2
megatron trainer -> hf engine, 4-layer slice, benchmarks/colocated_sync.py): 44.3 GiB in
47.1 s and 41.7 s (0.94, 1.06 GiB/s), in one process; Ray's object store adds to it."""
CUDA_IPC_GIB_PER_S = 54.0
"""hf engine on trainer rank 0's GPU taking buckets by CUDA IPC: gather and merge, pack into
the bucket's device buffer, device -> device load. Measured on one H200
(benchmarks/colocated_ipc_sync.py: megatron trainer rank 0 -> hf engine in a second process,
4-layer slice, merged, 45 buckets of 1 GiB; docs/results/colocated_ipc_sync_h200x1*.json):
44.3 GiB in 0.82, 0.77 and 0.64 s (54, 57, 70 GiB/s; the slowest is taken; _run3 was planned
with this constant), against 40.0, 39.8 and 43.2 s for host staging in the same runs. The
benchmark has no Ray: a run adds its actor calls, priced per bucket below."""
CUDA_IPC_BUCKET_OVERHEAD_S = 0.002
"""Per CUDA IPC bucket in a real run (Ray actor calls, handle exchange): the main job on one H200
(device/main_job_h200.sh, 2026-12-03) synced the slice's 44.3 GiB in 45 buckets in 0.61-0.80 s
a step, about the rate term alone; SYNC_BUCKET_OVERHEAD_S's 0.05 s had the plan at 3.0 s."""



class SyncTransport(StrEnum):
    """How weights travel from the trainer ranks to the engines (`sync_transport`); each value
    names the plug-in launcher/weight_sync/transports/ registers for it."""

    host = "host"
    """Buckets of host tensors through Ray's object store (CPU runs, async hf engines, every adapter sync)."""
    cuda_ipc = "cuda_ipc"
    """Buckets as CUDA IPC handles of trainer rank 0's device buffers (an hf engine on rank 0's GPU)."""
    vllm_ipc = "vllm_ipc"
    """vLLM's CUDA IPC transfer engine: colocated vLLM engines on GPUs, merged or full weights."""
    vllm_nccl = "vllm_nccl"
    """vLLM's NCCL transfer engine: async vLLM engines on GPUs, merged or full weights."""


TRANSFER_BUFFER_ALIGN_BYTES = 1 << 20


def largest_tensor_elements(a: ArchConfig) -> tuple[int, str]:
    """Elements of the largest single tensor a trainer streams (checkpoint names), and which.

    The stream is per checkpoint tensor: experts one by one (`mlp.experts.{e}.gate_proj`),
    gate/up/down apart, so the embedding and lm_head (vocab x hidden) lead on GLM.
    """
    f, h = facts(a), a.hidden_size
    sizes = {"embed_tokens / lm_head (vocab x hidden)": a.vocab_size * h}
    if f.n_dense or not f.has_moe:
        sizes["dense mlp (intermediate x hidden)"] = a.intermediate_size * h
    if f.has_moe:
        sizes["moe expert (moe_intermediate x hidden)"] = a.moe_intermediate_size * h
        sizes["shared experts"] = a.n_shared_experts * a.moe_intermediate_size * h
        sizes["router (experts x hidden)"] = a.n_routed_experts * h
    heads = a.num_attention_heads
    if f.has_kda:
        sizes["kda q/k/v/o_proj"] = a.linear_num_heads * a.linear_head_dim * h
    if f.has_dsa:
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        sizes["mla q_b_proj"] = heads * qk * a.q_lora_rank
        sizes["mla kv_b_proj"] = heads * (a.qk_nope_head_dim + a.v_head_dim) * a.kv_lora_rank
        sizes["mla o_proj"] = heads * a.v_head_dim * h
        sizes["mla q_a_proj"] = a.q_lora_rank * h
    if any(kind not in (KDA, DSA) for kind in f.layer_types):
        hd = a.head_dim or h // heads
        sizes["attention q/o_proj"] = heads * hd * h
    which = max(sizes, key=sizes.get)
    return sizes[which], which


def transfer_buffer_bytes(cfg: LauncherConfig, bucket_bytes: int = int(SYNC_BUCKET_GIB * GIB)) -> int:
    """A packed IPC/NCCL buffer (vLLM's `packed_buffer_size_bytes`, the hf engine's CUDA IPC
    bucket buffer): it must hold the largest single tensor (the producers refuse a larger one;
    vLLM's default 1 GiB is below GLM's 1.18 GiB embedding) and a whole bucket of
    `bucket_bytes`, rounded up to a MiB."""
    elements, _ = largest_tensor_elements(cfg.model.arch)
    need = max(elements * DTYPE_BYTES[cfg.model.dtype.value], bucket_bytes)
    return -(-need // TRANSFER_BUFFER_ALIGN_BYTES) * TRANSFER_BUFFER_ALIGN_BYTES


def sync_transport(cfg: LauncherConfig) -> SyncTransport:
    """cuda_ipc for an hf engine that shares trainer rank 0's GPU (colocated, on GPUs, one
    engine: engine 0 sits on GPU 0 with rank 0, launcher/plan/placement.py); vllm_ipc /
    vllm_nccl (colocated / async) for vLLM engines on GPUs taking merged or full weights;
    host otherwise.

    Only rank 0's buckets carry tensors, and an engine can map only memory of its own GPU
    (Ray shows each actor its GPU alone), so hf engines on other GPUs would need every rank's
    copy exported (what vLLM's IPC engine all-gathers); they, CPU runs and async hf runs keep
    host buckets, and so does every adapter sync (vLLM loads an adapter from a folder)."""
    c, inf = cfg.cluster, cfg.inference
    on_gpus = c.gpu.arch is not GpuArch.cpu
    colocated = cfg.placement.mode is PlacementMode.colocated
    if inf.backend is InferenceBackendName.hf:
        shares_rank0_gpu = colocated and inf.engines == 1 and inf.tp == 1
        return SyncTransport.cuda_ipc if on_gpus and shares_rank0_gpu else SyncTransport.host
    if on_gpus and sync_kind(cfg) is not SyncKind.adapter:
        return SyncTransport.vllm_ipc if colocated else SyncTransport.vllm_nccl
    return SyncTransport.host


LINK_GIB_PER_S = {SyncTransport.host: HOST_STAGED_GIB_PER_S, SyncTransport.cuda_ipc: CUDA_IPC_GIB_PER_S}
LINK_NAMES = {SyncTransport.host: "host_staged", SyncTransport.cuda_ipc: "cuda_ipc"}
BUCKET_OVERHEAD_S = {SyncTransport.host: SYNC_BUCKET_OVERHEAD_S, SyncTransport.cuda_ipc: CUDA_IPC_BUCKET_OVERHEAD_S}


def bucketed_seconds(nbytes: float, transport: SyncTransport) -> float:
    """Seconds of an hf engine's bucketed sync of `nbytes` over `transport` (rate + per-bucket cost)."""
    buckets = max(nbytes / GIB / SYNC_BUCKET_GIB, 1.0)
    return nbytes / (LINK_GIB_PER_S[transport] * GIB) + buckets * BUCKET_OVERHEAD_S[transport]


class SyncKind(StrEnum):
    """What every weight sync ships. A StrEnum: the plan's JSON and tables print the value."""

    adapter = "adapter"
    """The LoRA adapter (trainer.lora.merge false); the engines keep the frozen base."""
    merged = "merged"
    """The base with the adapter merged in."""
    full = "full"
    """Every weight (full fine-tuning)."""


@dataclass
class SyncPlan:
    kind: SyncKind
    """merged | adapter | full (full fine-tuning ships the whole model, like merged)."""
    bytes_per_engine: int
    gib_per_engine: float
    link: str
    seconds: float
    largest_tensor_bytes: int = 0
    """The largest single tensor streamed (model dtype), from the arch fields."""
    largest_tensor: str = ""
    """Which tensor that is."""
    transfer_buffer_bytes: int = 0
    """Packed IPC/NCCL buffer (vLLM's packed_buffer_size_bytes, the hf engine's CUDA IPC
    bucket buffer): >= largest tensor and the bucket."""
    transport: SyncTransport = SyncTransport.host
    """How the weights reach the engines (sync_transport): the driver's pump, the trainers'
    export and the engines' start-up all read it (launcher/weight_sync/transports/)."""
    export_model_bytes: int = 0
    """What `launcher export` writes for the whole model (LoRA merged): every weight in the model dtype."""
    export_adapter_bytes: int = 0
    """What `launcher export --adapter` writes: the LoRA adapter in the model dtype (0 without LoRA)."""


def sync_kind(cfg: LauncherConfig) -> SyncKind:
    """What every weight sync ships; the sleep level is derived from it too."""
    if cfg.trainer.lora.rank > 0:
        return SyncKind.merged if cfg.trainer.lora.merge else SyncKind.adapter
    return SyncKind.full


def plan_sync(cfg: LauncherConfig, params: ParamCounts, lora: LoraPlan, trainer_gpus: int) -> SyncPlan:
    dtype = DTYPE_BYTES[cfg.model.dtype.value]
    kind = sync_kind(cfg)
    nbytes = (lora.params_shipped if kind is SyncKind.adapter else params.total) * dtype
    inf, links = cfg.inference, cfg.cluster.links
    transport = sync_transport(cfg)
    buckets = max(nbytes / GIB / SYNC_BUCKET_GIB, 1.0) * SYNC_BUCKET_OVERHEAD_S
    if inf.backend is InferenceBackendName.hf:
        link, seconds = LINK_NAMES[transport], bucketed_seconds(nbytes, transport)
    elif cfg.placement.mode is PlacementMode.colocated:
        link, seconds = "intra_node", nbytes * 8 / (inf.tp * links.intra_node_gbps * 1e9) + buckets
    else:
        rate = links.inter_node_gbps * 1e9 * NETWORK_EFFICIENCY
        receive = nbytes * 8 / (inf.tp * rate)
        send = inf.engines * nbytes * 8 / (max(trainer_gpus, 1) * rate)
        link, seconds = "inter_node", max(receive, send) + buckets
    largest, which = largest_tensor_elements(cfg.model.arch)
    return SyncPlan(kind=kind, bytes_per_engine=int(nbytes), gib_per_engine=nbytes / GIB, link=link, seconds=seconds,
                    largest_tensor_bytes=largest * dtype, largest_tensor=which,
                    transfer_buffer_bytes=transfer_buffer_bytes(cfg), transport=transport,
                    export_model_bytes=params.total * dtype, export_adapter_bytes=lora.params_shipped * dtype)
