"""`placement:` section: how the trainer and inference groups share the cluster."""
from dataclasses import dataclass
from typing import Optional

from launcher.config.schema.choices import PlacementMode


@dataclass
class PlacementConfig:
    mode: PlacementMode = PlacementMode["colocated"]
    """`colocated`: trainer ranks and engines share every GPU, engines sleep while the
    trainer trains (sync loop). `async`: disjoint nodes, generation never waits for
    training (needs algorithm.max_staleness >= 1)."""
    trainer_nodes: Optional[int] = None
    """Nodes for the trainer group; null = all nodes (colocated) or nodes - inference_nodes (async)."""
    inference_nodes: Optional[int] = None
    """Nodes for the inference group in async mode; null = all nodes (colocated) or 1 (async)."""
