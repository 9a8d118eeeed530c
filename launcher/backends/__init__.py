"""Trainer and inference backends behind Protocols, looked up by the config's short name."""
from launcher.backends.protocols import (
    Generation,
    GenerationRequest,
    InferenceBackend,
    SamplingParams,
    TrainerBackend,
    TrainShard,
    WeightUpdate,
)
from launcher.backends.registry import ENGINES, TRAINERS, engine_class, trainer_class

__all__ = [
    "ENGINES", "TRAINERS", "Generation", "GenerationRequest", "InferenceBackend", "SamplingParams",
    "TrainShard", "TrainerBackend", "WeightUpdate", "engine_class", "trainer_class",
]
