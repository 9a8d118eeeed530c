"""Typed config schema: one dataclass per section, registered in Hydra's ConfigStore.

A recipe names `launcher_schema` (through the primary config) and only sets values, so a
misspelt key fails at composition with its full dotted path.
"""
from hydra.core.config_store import ConfigStore

from launcher.config.schema.root import LauncherConfig

__all__ = ["LauncherConfig", "SCHEMA_NAME", "register_schema"]

SCHEMA_NAME = "launcher_schema"


def register_schema() -> None:
    """Store the root dataclass once; Hydra validates every composed value against it."""
    ConfigStore.instance().store(name=SCHEMA_NAME, node=LauncherConfig)
