"""Per-GPU and per-node memory: trainer, inference, colocated phases, host.

Colocated runs alternate two phases on the same GPUs. Generation: the engine is awake (a
vLLM engine owns its gpu_memory_utilization budget; an hf engine its weights and cache)
while the trainer has offloaded weights, grads and optimizer and keeps only its runtime
reserve. Training: the trainer's full footprint
plus what a sleeping engine keeps (sleep level 0 never releases the budget).
Before the first step they start up (launcher/driver/actors/session.py place_groups): the
engines start and go to sleep, then the trainer builds (start-up: the sleeping engine +
the built trainer), then the first weight sync wakes the engines' weights while the
trainer is still whole (first sync: + the engine's weights + one transfer bucket + the
temporaries both sides allocate while converting weights, sync_temporaries_gib).
Host memory per node: sleeping engines' weights (sleep level 1), the colocated
trainer's offloaded state, CPU-offloaded optimizer state, and the processes themselves. The sleep level is the
resolved one (plan/_sleep.py), which the engines and the sync loop use.
"""
from dataclasses import dataclass

from launcher.config.schema.choices import InferenceBackendName, PlacementMode, WeightsDtype
from launcher.config.schema.root import LauncherConfig
from launcher.plan._origin import Origins
from launcher.plan._sleep import resolve_sleep_level
from launcher.plan.arch import ArchFacts
from launcher.plan.env import trainer_compile_threads
from launcher.plan.fp8 import largest_layer_elements
from launcher.plan.lora import LoraPlan
from launcher.plan.memory_inference import ENGINE_ASLEEP_GIB, InferenceMemory, engine_reserve, inference_memory
from launcher.plan.memory_trainer import DTYPE_BYTES, GIB, TrainerMemory, trainer_memory
from launcher.plan.mesh import MeshPlan
from launcher.plan.params import ParamCounts
from launcher.plan.sync import SyncKind, sync_kind, transfer_buffer_bytes


@dataclass
class PhaseMemory:
    generation_gib: float
    training_gib: float
    peak_gib: float
    """The larger of generation and training: what every step needs (MEM004)."""
    startup_gib: float
    """The engine asleep + the trainer built (weights, grads, optimizer, LoRA, runtime: all but
    activations), before the first sync (MEM008)."""
    first_sync_gib: float
    """The first weight sync: start-up + the engine's weights awake + one transfer bucket + the
    conversion temporaries (MEM008)."""
    transfer_bucket_gib: float
    """One bucket of the weight stream (plan/sync.py transfer_buffer_bytes: >= the largest tensor)."""
    sync_temporaries_gib: float
    """What a sync allocates beside the weights and buckets (sync_temporaries_gib)."""


RAY_AND_DRIVER_GIB = 2.5
"""Host RSS of the driver and Ray's own processes (GCS, raylet, dashboard, agents) on a node."""
ACTOR_PROCESS_GIB = {"cpu": 0.6, "gpu": 1.3}
"""Host RSS of one engine or trainer process before it holds any weights (torch, the backends'
imports, a CUDA context's host side): the 4-layer slice on one H200 sampled 5.3 GiB for the
driver, Ray, one engine and one trainer at start-up."""
INDUCTOR_WORKER_GIB = 0.4
"""One of inductor's compile workers (model/megatron/fused.py's kernels), each a process with torch
imported: the slice's host RSS rose ~6.5 GiB as the trainer's first compile started 16 of them
(plan/env.py now caps them at TRAINER_COMPILE_THREADS per trainer)."""


@dataclass
class HostMemory:
    sleeping_engine_weights_gib: float
    offloaded_trainer_gib: float
    optimizer_offload_gib: float
    processes_gib: float
    """The driver's, Ray's and the actors' own processes, and the trainers' compile workers."""
    total_per_node_gib: float


@dataclass
class MemoryPlan:
    trainer: TrainerMemory
    inference: InferenceMemory
    colocated: PhaseMemory | None
    host: HostMemory
    sleep_level: int
    """The level engines sleep at (0: never): inference.sleep_level, or derived from placement and sync kind."""


def sync_temporaries_gib(cfg: LauncherConfig, mesh: MeshPlan, f: ArchFacts) -> float:
    """Per GPU, the largest transient tensors of a colocated sync, measured on the 4-layer slice
    (one H200, docs/results.md: first sync 118 GiB sampled against 97 GiB planned without them):
    - the trainer's LoRA merge of the experts, when a merged sync adapts them: one expert at a
      time where a rank holds the whole stack (model/megatron/weights.py hf_stream), else a copy
      of the rank's [experts, out, in] fc1 or fc2 to gather (LoraGrouped.merged_weight; 9 GiB
      on the slice, which with the engine's assembly ran the H200 out of memory in step 1's sync);
    Engines add nothing here: vLLM's and the hf engine (launcher/workers/hf/experts_in_place.py)
    copy each expert's tensors into their fused parameters as they arrive. (The hf engine's
    stacking and concatenation, as transformers runs its rules, held three copies of a layer's
    fused tensor: 27 GiB on the slice, where step 1's sync ran out of memory.)
    - with FP8 engine weights, the engine's BF16 copy of the largest layer it quantizes, held by
      vLLM's layerwise reload until the layer's last weight arrives (plan/fp8.py), split over tp."""
    return _merge_temporaries_gib(cfg, mesh, f) + _quantize_temporaries_gib(cfg)


def _quantize_temporaries_gib(cfg: LauncherConfig) -> float:
    if cfg.inference.weights_dtype is not WeightsDtype.fp8:
        return 0.0
    layer = largest_layer_elements(cfg.model.arch) * DTYPE_BYTES[cfg.model.dtype.value]
    return layer / max(cfg.inference.tp, 1) / GIB


def _merge_temporaries_gib(cfg: LauncherConfig, mesh: MeshPlan, f: ArchFacts) -> float:
    """The merged LoRA experts' copies (see sync_temporaries_gib)."""
    a = cfg.model.arch
    if not f.has_moe:
        return 0.0
    dtype_bytes = DTYPE_BYTES[cfg.model.dtype.value]
    expert_bytes = a.moe_intermediate_size * a.hidden_size * dtype_bytes  # one of gate, up, down
    total, targets = 0.0, set(cfg.trainer.lora.targets)
    if sync_kind(cfg) is SyncKind.merged and targets & {"linear_fc1", "linear_fc2"}:
        widest = 2 if "linear_fc1" in targets else 1  # fc1 holds gate and up
        stacked = mesh.ep > 1 or mesh.etp > 1  # the stack is gathered whole across ranks
        total += (mesh.experts_per_gpu / mesh.etp if stacked else 1) * widest * expert_bytes
    return total / GIB


def _engine_awake_gib(cfg: LauncherConfig, inf: InferenceMemory) -> float:
    """What an awake engine holds: vLLM preallocates its whole gpu_memory_utilization budget; the
    hf engine allocates its weights and the cache of the sequences it generates, no more (the
    4-layer slice on one H200: 46.6 GiB sampled in generation against a 97.9 GiB budget)."""
    return inf.budget_gib if cfg.inference.backend is InferenceBackendName.vllm else inf.total_gib


def _phases(cfg: LauncherConfig, tr: TrainerMemory, inf: InferenceMemory, level: int, temporaries: float) -> PhaseMemory:
    awake = _engine_awake_gib(cfg, inf)
    generation = awake + tr.runtime_gib
    asleep = engine_reserve(ENGINE_ASLEEP_GIB, cfg.cluster.gpu.arch.value)
    engine_asleep = awake if level == 0 else asleep
    training = tr.total_gib + engine_asleep
    startup = tr.total_gib - tr.activations_gib + engine_asleep
    woken = 0.0 if level == 0 else inf.weights_gib  # an awake engine's weights are inside its budget
    bucket = transfer_buffer_bytes(cfg) / GIB
    return PhaseMemory(generation_gib=generation, training_gib=training, peak_gib=max(generation, training),
                       startup_gib=startup, first_sync_gib=startup + woken + bucket + temporaries,
                       transfer_bucket_gib=bucket, sync_temporaries_gib=temporaries)


def _host(cfg: LauncherConfig, tr: TrainerMemory, inf: InferenceMemory, colocated: bool, level: int) -> HostMemory:
    gpn = cfg.cluster.gpus_per_node
    sleeping = inf.weights_gib * gpn if colocated and level == 1 else 0.0
    offloaded = (tr.weights_gib + tr.grads_gib + tr.optimizer_gib + tr.lora_gib) * gpn if colocated else 0.0
    optim = tr.optimizer_host_gib * gpn
    processes = _processes_gib(cfg)
    return HostMemory(sleeping_engine_weights_gib=sleeping, offloaded_trainer_gib=offloaded,
                      optimizer_offload_gib=optim, processes_gib=processes,
                      total_per_node_gib=sleeping + offloaded + optim + processes)


def _processes_gib(cfg: LauncherConfig) -> float:
    """A node's processes at most: the driver and Ray, a trainer and an engine process per GPU,
    and each GPU trainer's inductor compile workers."""
    gpn, arch = cfg.cluster.gpus_per_node, cfg.cluster.gpu.arch.value
    workers = trainer_compile_threads(cfg) * INDUCTOR_WORKER_GIB * gpn
    return RAY_AND_DRIVER_GIB + 2 * gpn * engine_reserve(ACTOR_PROCESS_GIB, arch) + workers


def plan_memory(cfg: LauncherConfig, params: ParamCounts, mesh: MeshPlan, lora: LoraPlan, f: ArchFacts,
                log: Origins) -> MemoryPlan:
    tr = trainer_memory(cfg, params, mesh, lora, f)
    inf = inference_memory(cfg, params, f)
    colocated = cfg.placement.mode is PlacementMode.colocated
    level, why = resolve_sleep_level(cfg, sync_kind(cfg))
    log.add("memory.sleep_level", level, why)
    phases = _phases(cfg, tr, inf, level, sync_temporaries_gib(cfg, mesh, f)) if colocated else None
    return MemoryPlan(trainer=tr, inference=inf, colocated=phases, host=_host(cfg, tr, inf, colocated, level),
                      sleep_level=level)
