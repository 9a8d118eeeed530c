"""The driver's one entry to weight sync: push a policy version with the plan's transport.

`sync_weights` hands the push to the plug-in registered for plan.sync.transport
(transports/): the bucket pump (pump.py) for host and CUDA IPC buckets, vLLM's transfer
engines for GPU vLLM engines. Before a push the driver checks what the previous
asynchronous one left queued (`check_pending`) and whether the engines already serve the
frozen base an adapter sits on (`engines_hold_base`).
"""
from launcher.plan.sync import BUCKET_BYTES, SyncKind
from launcher.weight_sync.base_identity import folder_base
from launcher.weight_sync.messages import SyncStats
from launcher.weight_sync.transports import transport_for


def sync_weights(trainers, engines, version: int, with_base: bool, wait: bool,
                 max_bucket_bytes: int | None = None) -> SyncStats:
    """Push policy `version` from the trainer group to the engine group (driver/actors/) by
    the trainer group's transport (plan.sync.transport)."""
    return transport_for(trainers.transport).sync(trainers, engines, version, with_base, wait,
                                                  max_bucket_bytes or BUCKET_BYTES)


def engines_hold_base(engines, kind: SyncKind, hf_path: str | None) -> bool:
    """Adapter sync (`kind`, the plan's plan.sync.kind): whether every engine already serves
    the frozen base the trainer adapts, the model folder `hf_path` (model.hf_path: same folder,
    same sha256 of its index) it loaded at start; then a sync asked to send the base (the
    first one) sends only the adapter. A random init (no hf_path) has no such base, and an
    engine that dropped its weights (sleep level 2) reports none."""
    if kind is not SyncKind.adapter or not hf_path:
        return False
    expected = folder_base(hf_path)
    return all(loaded == expected for loaded in engines.call("loaded_base"))


def check_pending(engines, pending: list) -> None:
    """Raise the error of a previous wait=False sync, if any (its calls are done by now or soon)."""
    for refs in pending:
        if refs:
            engines.wait(refs, "weight update")
