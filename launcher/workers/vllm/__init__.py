"""The `vllm` inference backend: vLLM engines as Ray actors, sleep/wake for colocation,
merged (bucketed, or CUDA IPC / NCCL on GPUs: launcher/weight_sync/transports/vllm_engine.py)
and LoRA-adapter weight sync.

Registered as "vllm" on import (launcher.workers.registry discovers this package). vllm
itself is imported only when an engine starts, so discovery works where it is absent. On
CPU it runs from .venv-vllm (scripts/setup_vllm_cpu.sh): tests/integration/test_vllm_cpu.py.
"""
from launcher.workers.vllm.actor import VllmInference

__all__ = ["VllmInference"]
