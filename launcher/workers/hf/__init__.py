"""The `hf` backends: transformers + torch on CPU or one GPU per actor.

They make the whole system runnable on a laptop or CI with a tiny GLM-5.3-Flash and are
the numerical reference for the Megatron and vLLM backends.
"""
from launcher.workers.hf.engine import HfEngine
from launcher.workers.hf.trainer import HfTrainer

__all__ = ["HfEngine", "HfTrainer"]
