"""The whole run config: one field per public section (docs/design.md)."""
from dataclasses import dataclass, field

from launcher.config.schema.algorithm import AlgorithmConfig
from launcher.config.schema.checkpoint import CheckpointConfig
from launcher.config.schema.cluster import ClusterConfig
from launcher.config.schema.data import DataConfig
from launcher.config.schema.inference import InferenceConfig
from launcher.config.schema.logging import LoggingConfig
from launcher.config.schema.model import ModelConfig
from launcher.config.schema.placement import PlacementConfig
from launcher.config.schema.run import RunConfig
from launcher.config.schema.trainer import TrainerConfig


@dataclass
class LauncherConfig:
    run: RunConfig = field(default_factory=RunConfig)
    """Identity, length and resumption."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The network and its architecture fields."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """The hardware."""
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    """Colocated or async split of the cluster."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """Training group."""
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    """Generation group."""
    data: DataConfig = field(default_factory=DataConfig)
    """Prompts and reward."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """RL algorithm and batch chain."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Metric sinks."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpointing."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for every Ray worker (merged over the planner's)."""
