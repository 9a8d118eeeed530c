"""The `megatron` trainer backend: GLM-5.3-Flash on megatron-core 0.19.2 (model/megatron).

Imports megatron-core at import time: on a machine without it, the registry reports this
backend as unavailable with the import error, and the others still load.
"""
from launcher.workers.megatron.trainer import MegatronTrainer

__all__ = ["MegatronTrainer"]
