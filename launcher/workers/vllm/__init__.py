"""The `vllm` inference backend: vLLM engines as Ray actors, sleep/wake for colocation,
merged (bucketed, or CUDA IPC / NCCL on GPUs) and LoRA-adapter weight sync.

Registered as "vllm" on import (launcher.workers.registry discovers this package). vllm
itself is imported only when an engine starts, so discovery works where it is absent. On
CPU it runs from .venv-vllm (scripts/setup_vllm_cpu.sh): tests/integration/test_vllm_cpu.py.
"""
from launcher.workers.vllm.actor import VllmInference
from launcher.workers.vllm.transfer import stream_source, trainer_sender

__all__ = ["VllmInference", "stream_source", "trainer_sender"]
