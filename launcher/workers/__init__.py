"""Worker processes: trainer backends (hf, megatron) and inference engines (hf, vllm), looked
up by the config's short name. The shared actor contract is `launcher.contract`.
"""
from launcher.workers.registry import ENGINES, TRAINERS, engine_class, trainer_class

__all__ = ["ENGINES", "TRAINERS", "engine_class", "trainer_class"]
