"""Rule modules, one per area; importing them registers their rules."""
from launcher.validate.rules import algorithm, inference, lora, memory, mesh, model, recompute, runtime, sequence  # noqa: F401
