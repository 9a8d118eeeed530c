"""Parallel state and model construction from launcher settings (mesh, descriptor).

The process group must exist already (torchrun / Ray worker / a gloo group of one in the
CPU tests); this sets up Megatron's TP/EP/ETP groups on it and builds this rank's model.
"""
import torch
import torch.distributed as dist
from megatron.core import parallel_state as ps

from model.megatron.model import GlmModel
from model.megatron.spec import ModelSpec


def init_parallel(tp: int, ep: int, etp: int, timeout_s: float | None = None) -> None:
    """Megatron's groups for this mesh (pp = cp = 1: mHC forbids PP, KDA has no CP path).

    timeout_s: how long a collective of these groups may wait; None = the world group's
    (Megatron's own default, 30 min, would silently replace the one the world was made with).
    """
    if not dist.is_initialized():
        raise RuntimeError("init_parallel needs torch.distributed initialised first (init_process_group)")
    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
    timeout_s = group_timeout_s() if timeout_s is None else timeout_s
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, expert_model_parallel_size=ep,
                                 expert_tensor_parallel_size=etp, distributed_timeout_minutes=timeout_s / 60)


def group_timeout_s(group: dist.ProcessGroup | None = None) -> float:
    """The collective timeout `group` (default: the world) was created with, in seconds.

    torch keeps it only in the backend's options (no public getter in torch 2.14)."""
    group = group if group is not None else dist.group.WORLD
    device = torch.device("cuda") if dist.get_backend(group) == "nccl" else torch.device("cpu")
    return group._get_backend(device).options._timeout.total_seconds()


def build_model(spec: ModelSpec, device: torch.device | str, recompute_layers: bool = False,
                recompute_modules: frozenset[str] = frozenset()) -> GlmModel:
    """This rank's shards, allocated directly on `device` (values: init_weights or load_hf_state).

    recompute_layers: whole-layer recompute (`full`); recompute_modules: `selective`.
    """
    with torch.device(device):
        return GlmModel(spec, recompute_layers=recompute_layers, recompute_modules=recompute_modules)
