"""Parallel state and model construction from launcher settings (mesh, descriptor).

The process group must exist already (torchrun / Ray worker / a gloo group of one in the
CPU tests); this sets up Megatron's TP/EP/ETP groups on it and builds this rank's model.
"""
import torch
import torch.distributed as dist
from megatron.core import parallel_state as ps

from model.megatron.model import GlmModel
from model.megatron.spec import ModelSpec


def init_parallel(tp: int, ep: int, etp: int) -> None:
    """Megatron's groups for this mesh (pp = cp = 1: mHC forbids PP, KDA has no CP path)."""
    if not dist.is_initialized():
        raise RuntimeError("init_parallel needs torch.distributed initialised first (init_process_group)")
    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, expert_model_parallel_size=ep,
                                 expert_tensor_parallel_size=etp)


def build_model(spec: ModelSpec, device: torch.device | str, recompute_layers: bool = False,
                recompute_modules: frozenset[str] = frozenset()) -> GlmModel:
    """This rank's shards, allocated directly on `device` (values: init_weights or load_hf_state).

    recompute_layers: whole-layer recompute (`full`); recompute_modules: `selective`.
    """
    with torch.device(device):
        return GlmModel(spec, recompute_layers=recompute_layers, recompute_modules=recompute_modules)
