"""Weight sync: the trainer's weights to every engine after each step, as one package.

    messages.py       what crosses the actors: WeightUpdate, WeightBucket, BucketInfo, EngineWait, SyncStats
    export.py         trainer side: the weight stream cut into buckets (StreamedExport), the GPU transfer's sender
    receive.py        engine side: the update state machine (WeightReceiver), what an engine serves (ServedWeights)
    manifest.py       engine side: what an update delivered against the engine's checkpoint names
    push.py           driver side: sync_weights by the plan's transport; the frozen-base skip; queued errors
    pump.py           driver side: the bucket pump (with Ray groups, or in one process)
    base_identity.py  which frozen base a model folder is (its path and a fingerprint)
    transports/       one plug-in per plan.sync.transport (host, cuda_ipc, vllm_ipc, vllm_nccl)

The planner keeps the choice and the price (launcher/plan/sync.py): what ships
(plan.sync.kind), the transport (plan.sync.transport), bucket sizes and seconds. The layer
sits above contract and below workers: the backends build on it, the driver calls push.py.
"""
