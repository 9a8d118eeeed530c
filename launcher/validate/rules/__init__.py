"""Rule modules, one per area; importing them registers their rules."""
from launcher.validate.rules import (  # noqa: F401
    algorithm,
    data,
    data_preflight,
    inference,
    lora,
    memory,
    mesh,
    model,
    recompute,
    reward,
    routing,
    runtime,
    sequence,
    shards,
    storage,
    tokenizer,
)
