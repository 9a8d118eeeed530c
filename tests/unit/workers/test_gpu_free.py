"""The GPU pre-flight (launcher/workers/gpu_free.py): what each actor needs free, and the refusal
that names the holders. torch.cuda's answers are set here (no GPU on this machine); the H200
case it reproduces: 72 GiB held by the process that wrote the checkpoint."""
import dataclasses

import pytest
import torch

from launcher.contract.spec import ActorSpec
from launcher.workers.gpu_free import GIB, GpuBusyError, check_gpu_free, need_gib
from tests.shared_compose import compose_shipped

SLICE4 = ["recipe=tiny_grpo_chat", "model=glm5_3_flash_4layer", "cluster=h200x1", "inference.engines=1",
          "trainer.backend=megatron", "model.dtype=bfloat16", "trainer.lora.rank=16"]


RUN_BOARD = object()
"""Stands for the driver's start-up board: the actor is inside a run."""


def _spec(*overrides: str, board=RUN_BOARD) -> ActorSpec:
    return dataclasses.replace(ActorSpec.planned(compose_shipped([*SLICE4, *overrides]).config), board=board)


def _gpu(monkeypatch, free_gib: float, total_gib: float = 139.8, holders: str = "") -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (int(free_gib * GIB), int(total_gib * GIB)))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 0)
    monkeypatch.setattr(torch.cuda, "list_gpu_processes", lambda: f"GPU:0\n{holders}")


def test_what_each_actor_needs_free():
    spec = _spec()
    ph, tr = spec.plan.memory.colocated, spec.plan.memory.trainer
    assert need_gib(spec, "engine") == max(ph.peak_gib, ph.first_sync_gib)  # the first on a colocated GPU
    assert need_gib(spec, "trainer") == pytest.approx(tr.total_gib - tr.activations_gib)
    assert need_gib(_spec("inference.backend=vllm", "placement.mode=async", "cluster.gpus_per_node=2"), "engine") is None


def test_an_engine_refuses_a_gpu_another_process_fills(monkeypatch):
    _gpu(monkeypatch, free_gib=67.8, holders="process        506 uses 73728.000 MB GPU memory")
    with pytest.raises(GpuBusyError, match=r"engine 0: its GPU has 67\.8 of 139\.8 GiB free .* the plan needs "
                                           r"\d+\.\d GiB .* other processes hold 72\.0 GiB \(process +506 uses"):
        check_gpu_free(_spec(), "engine", "engine 0")


def test_a_free_gpu_and_runs_outside_the_driver_pass(monkeypatch):
    _gpu(monkeypatch, free_gib=139.3)
    check_gpu_free(_spec(), "engine", "engine 0")
    _gpu(monkeypatch, free_gib=10.0)
    check_gpu_free(_spec(board=None), "engine", "engine 0")  # a test or benchmark: builds in any order
