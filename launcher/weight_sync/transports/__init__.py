"""The weight-sync transports, one module each, registered under plan.sync.transport's value.

    host.py         buckets of host tensors through Ray's object store
    cuda_ipc.py     buckets as CUDA IPC handles of trainer rank 0's device buffers (an hf engine on its GPU)
    vllm_engine.py  vLLM's own transfer engines (CUDA IPC colocated, NCCL async), GPU vLLM engines
"""
from launcher.plan.sync import SyncTransport
from launcher.weight_sync.transports import cuda_ipc, host, vllm_engine  # noqa: F401  (they register)
from launcher.weight_sync.transports.base import TRANSPORTS, Transport


def transport_for(kind: SyncTransport) -> Transport:
    """The plug-in for `kind` (plan.sync.transport)."""
    return TRANSPORTS.get(kind)()
