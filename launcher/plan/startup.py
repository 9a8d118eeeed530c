"""Start-up: what each actor builds or reads before the first step, and how long that takes.

An actor never initializes weights that a checkpoint or the first sync will overwrite:
- the trainer reads its shards of `model.hf_path`, or runs the random init on its GPU;
- an engine reads the checkpoint only when it keeps serving that base: adapter sync with
  engines that do not drop their weights (sleep level < 2). Under merged or full sync every
  sync re-sends every weight, and a level-2 sleep drops them before the first sync, so the
  engine starts empty (no memory, no init) and the first sync fills it.

The estimate prices the bytes a node reads from storage and the bytes its GPUs initialize,
plus a fixed overhead, and the first sync; the driver derives the first-call deadline of
the start-up calls from it (launcher/driver/actors/deadlines.py), and `plan` prints it.
"""
from dataclasses import dataclass

from launcher.config.schema.choices import GpuArch, InferenceBackendName
from launcher.config.schema.root import LauncherConfig
from launcher.plan.memory import MemoryPlan
from launcher.plan.sync import SyncKind, SyncPlan

STARTUP_OVERHEAD_S = 60.0
"""Imports, Ray actor start, process groups and (on GPUs) CUDA context and kernel loads,
before any weight is read."""
VLLM_COMPILE_S = 45.0
"""A vLLM engine on GPUs compiles its model (torch.compile) and captures CUDA graphs before it
serves: on one H200 with vLLM 0.26 the Qwen3-30B-A3B 4-layer slice's engine took 65-78 s to start
under the launcher (4 starts, 2026-12-04) where the hf engine took 12 s; the runs' start-up was
93-106 s against the 61 s planned without this term."""
GPU_INIT_GIB_PER_S = 20.0
"""Random init on a GPU (seeded normal draws in place): memory-bound, far above storage."""
CPU_INIT_GIB_PER_S = 0.05
"""Random init on CPU (HF's rules, one thread): what made the 4-layer slice take 9 minutes."""


@dataclass
class StartupPlan:
    trainer_weights: str
    """"checkpoint" (model.hf_path) or "random init"."""
    engine_reads_checkpoint: bool
    """True: engines load model.hf_path; False: they start empty and the first sync fills them."""
    read_gib_per_node: float
    """What one node's actors read from storage (trainer shards, engines' whole copies)."""
    init_gib_per_gpu: float
    """Random-init bytes per trainer GPU."""
    storage_gib_per_s: float
    """cluster.links.storage_gib_per_s: the reads' rate here, and the checkpoints' in the deadlines."""
    seconds: float
    """Estimate from the command to the first step: overhead, reads, init, first sync."""
    basis: str
    """How `seconds` was derived, for the plan table and a deadline's error."""


def engine_reads_checkpoint(cfg: LauncherConfig, sync: SyncPlan, sleep_level: int) -> bool:
    return bool(cfg.model.hf_path) and cfg.inference.engines > 0 and sync.kind is SyncKind.adapter and sleep_level < 2


def plan_startup(cfg: LauncherConfig, memory: MemoryPlan, sync: SyncPlan) -> StartupPlan:
    tr, inf, gpn = memory.trainer, memory.inference, cfg.cluster.gpus_per_node
    reads = engine_reads_checkpoint(cfg, sync, memory.sleep_level)
    from_checkpoint = bool(cfg.model.hf_path)
    trainer_gib = tr.weights_gib * gpn
    read = (trainer_gib if from_checkpoint else 0.0) + (inf.weights_gib * gpn if reads else 0.0)
    init = 0.0 if from_checkpoint else tr.weights_gib
    init_rate = CPU_INIT_GIB_PER_S if cfg.cluster.gpu.arch is GpuArch.cpu else GPU_INIT_GIB_PER_S
    storage = cfg.cluster.links.storage_gib_per_s
    compile_s = VLLM_COMPILE_S if cfg.inference.backend is InferenceBackendName.vllm and \
        cfg.cluster.gpu.arch is not GpuArch.cpu and cfg.inference.engines > 0 else 0.0
    seconds = STARTUP_OVERHEAD_S + compile_s + read / storage + init / init_rate + sync.seconds
    basis = (f"{STARTUP_OVERHEAD_S:.0f} s overhead + " + (f"{compile_s:.0f} s vLLM compile and CUDA graphs + "
             if compile_s else "") + f"{read:.1f} GiB read per node at {storage:g} GiB/s + "
             f"{init:.1f} GiB random init per GPU at {init_rate:g} GiB/s + {sync.seconds:.1f} s first sync")
    return StartupPlan(trainer_weights="checkpoint" if from_checkpoint else "random init",
                       engine_reads_checkpoint=reads, read_gib_per_node=read, init_gib_per_gpu=init,
                       storage_gib_per_s=storage, seconds=seconds, basis=basis)
