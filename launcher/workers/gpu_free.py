"""A run's actors refuse a GPU that other processes already hold, before they allocate anything.

A stale process of an earlier run, or a script that keeps its CUDA cache, leaves a GPU part
full; the run then loads for minutes and fails in its first sync with a CUDA out-of-memory
error that names no cause (the H200, 2026-12-03: 72 GiB held by the process that had written
the checkpoint; the trainer read 44 GiB, then the engine's first materialize ran out of memory
78 s after the command). Checked against the plan, the same GPU refuses in the first second,
saying who holds what.

What each actor needs free when it starts (need_gib):
- colocated, an engine (the first of the run on its GPU): the plan's peak of a step or of the
  first sync, whichever is larger;
- a trainer rank: what it builds (weights, grads, optimizer, LoRA, runtime), the engine's share
  of a colocated GPU being asleep by then;
- a split-placement hf engine: its weights and cache. vLLM checks its own budget against the
  free memory (gpu_memory_utilization) and says so.
Only inside a run (an ActorSpec with the driver's board): tests and benchmarks build trainers and
engines in one process or in any order.
"""
import torch

from launcher.config.schema.choices import InferenceBackendName, PlacementMode
from launcher.contract.spec import ActorSpec

GIB = 2**30


class GpuBusyError(RuntimeError):
    """The actor's GPU has less free memory than the plan needs there, before the actor allocated any."""


def need_gib(spec: ActorSpec, role: str) -> float | None:
    """Free GPU memory `role` ("engine" or "trainer") needs at its start; None: not checked here."""
    config, mem = spec.config, spec.plan.memory
    if role == "trainer":
        return mem.trainer.total_gib - mem.trainer.activations_gib
    if config.placement.mode is PlacementMode.colocated:
        return max(mem.colocated.peak_gib, mem.colocated.first_sync_gib)
    return None if config.inference.backend is InferenceBackendName.vllm else mem.inference.total_gib


def check_gpu_free(spec: ActorSpec, role: str, who: str) -> None:
    """Raise GpuBusyError when this process's GPU has less free memory than need_gib."""
    need = need_gib(spec, role)
    if spec.board is None or need is None or not torch.cuda.is_available():
        return
    free, total = torch.cuda.mem_get_info()
    free += torch.cuda.memory_reserved()  # this process's own cache is its to use
    if free / GIB >= need:
        return
    raise GpuBusyError(
        f"{who}: its GPU has {free / GIB:.1f} of {total / GIB:.1f} GiB free before the run allocated anything "
        f"there, and the plan needs {need:.1f} GiB for it (`launcher plan` shows the phases); other processes hold "
        f"{(total - free) / GIB:.1f} GiB{_holders()}. End them (nvidia-smi lists them: a stale run, a notebook), "
        "or run where the GPUs are free")


def _holders() -> str:
    """The GPU's processes and their memory, as torch lists them (needs pynvml; '' without it)."""
    try:
        listed = torch.cuda.list_gpu_processes().strip().splitlines()[1:]
    except (ModuleNotFoundError, RuntimeError, OSError):
        return ""
    return f" ({'; '.join(line.strip() for line in listed)})" if listed else ""
