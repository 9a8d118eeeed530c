"""Environment of every Ray worker: what the planner knows the stack needs, then the user's.

A driver-side export never reaches Ray workers, so CUDA_HOME (TileLang JIT-compiles with
nvcc from it) is forwarded explicitly; the user's `env` section wins over planner values.
"""
from collections.abc import Mapping

from launcher.config.schema.choices import GpuArch, InferenceBackendName, PlacementMode, TrainerBackendName
from launcher.config.schema.root import LauncherConfig
from launcher.plan._origin import Origins
from launcher.plan.arch import ArchFacts
from launcher.plan.sync import SyncKind, sync_kind

PRE_BLACKWELL = (GpuArch.ampere, GpuArch.ada, GpuArch.hopper)


TRAINER_COMPILE_THREADS = 4
"""Inductor compile workers per GPU trainer process (TORCHINDUCTOR_COMPILE_THREADS). Unset, each
process starts one per core of the node: 16 on the one-H200 machine (~6.5 GiB of host RSS), and
8 trainer ranks on a 128-core node would start 256. The fused kernels are small; dynamo's
single-threaded tracing, not the workers, was the first compile's time in the trainer's stacks."""


def trainer_compile_threads(cfg: LauncherConfig) -> int:
    """Compile workers per trainer process: only the Megatron trainer compiles (model/megatron/fused.py),
    and only on GPUs; 0 otherwise."""
    on_gpu = cfg.cluster.gpu.arch is not GpuArch.cpu
    return TRAINER_COMPILE_THREADS if on_gpu and cfg.trainer.backend is TrainerBackendName.megatron else 0


def plan_env(cfg: LauncherConfig, f: ArchFacts, driver_env: Mapping[str, str], log: Origins) -> dict[str, str]:
    env: dict[str, str] = {}
    arch, mesh = cfg.cluster.gpu.arch, cfg.trainer.mesh
    if "CUDA_HOME" in driver_env:
        env["CUDA_HOME"] = driver_env["CUDA_HOME"]
        log.add("env.CUDA_HOME", env["CUDA_HOME"], "the driver's CUDA_HOME (workers do not inherit exports)")
    if arch is GpuArch.blackwell and f.has_kda:
        env["FLA_TILELANG"] = "0"
        log.add("env.FLA_TILELANG", 0, "KDA kernels on Blackwell")
    if arch in PRE_BLACKWELL and (mesh.tp > 1 or mesh.cp > 1) and cfg.trainer.backend is TrainerBackendName.megatron:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
        log.add("env.CUDA_DEVICE_MAX_CONNECTIONS", 1, f"{arch.value} with tp {mesh.tp} / cp {mesh.cp}: Megatron requires it")
    env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
    if cfg.inference.backend is InferenceBackendName.vllm:
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine in the actor's process: weights reload in place
        if sync_kind(cfg) is SyncKind.adapter:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    if arch is not GpuArch.cpu and cfg.placement.mode is PlacementMode.colocated and \
            cfg.inference.backend is InferenceBackendName.hf:
        # Two processes share the GPU: blocks one caches in fragments the other cannot use. On one H200
        # the 4-layer slice's first sync ran out of memory with 8.8 GiB reserved but unallocated in the
        # engine, and fit with this. vLLM's sleep mode (CuMemAllocator) refuses expandable segments.
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        log.add("env.PYTORCH_CUDA_ALLOC_CONF", env["PYTORCH_CUDA_ALLOC_CONF"],
                "colocated hf engine and trainer share each GPU: freed blocks go back to the GPU, not one process's cache")
    if arch is not GpuArch.cpu and f.has_kda:
        # fla's KDA kernels autotune per shape (minutes on a first step); Triton writes the winners to its
        # cache folder only with this, so a resumed run, an export or the next run on the node skips it.
        env["TRITON_CACHE_AUTOTUNING"] = "1"
        log.add("env.TRITON_CACHE_AUTOTUNING", 1, "KDA's fla kernels: keep autotune results in Triton's disk cache")
    if trainer_compile_threads(cfg):
        env["TORCHINDUCTOR_COMPILE_THREADS"] = str(trainer_compile_threads(cfg))
        log.add("env.TORCHINDUCTOR_COMPILE_THREADS", env["TORCHINDUCTOR_COMPILE_THREADS"],
                "inductor's compile workers per process: unset, one per core of the node in every trainer rank")
    if arch is GpuArch.cpu:
        env["OMP_NUM_THREADS"] = "1"  # one thread per worker: trainer ranks and engines share few cores
    env.update({k: str(v) for k, v in cfg.env.items()})
    return env
