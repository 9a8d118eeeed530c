"""Trainer and inference backends behind Protocols, looked up by the config's short name."""
from launcher.backends.protocols import (
    BucketInfo,
    Generation,
    GenerationRequest,
    InferenceBackend,
    SamplingParams,
    TrainerBackend,
    TrainShard,
    WeightBucket,
    WeightUpdate,
)
from launcher.backends.registry import ENGINES, TRAINERS, engine_class, trainer_class

__all__ = [
    "ENGINES", "TRAINERS", "BucketInfo", "Generation", "GenerationRequest", "InferenceBackend", "SamplingParams",
    "TrainShard", "TrainerBackend", "WeightBucket", "WeightUpdate", "engine_class", "trainer_class",
]
