"""Compose a typed run config from the recipe tree and command-line overrides.

Uses Hydra's Compose API (the same defaults-list and override grammar as @hydra.main)
so the launcher controls the error path: every composition failure becomes a finding
with the full key, the value and the fix, and nothing is written before that succeeds.
"""
from dataclasses import dataclass, field

from hydra import compose as hydra_compose
from hydra import initialize
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf, open_dict

from launcher._compose_errors import translate
from launcher._config_files import store_all
from launcher.schema import SCHEMA_NAME, LauncherConfig, register_schema

DEFAULT_RECIPE = "tiny_grpo"
PRIMARY_NAME = "launcher"


@dataclass
class Composed:
    """A composed run: the typed object rules read, the DictConfig we print, and provenance."""

    config: LauncherConfig
    cfg: DictConfig
    choices: dict[str, str]
    overrides: list[str] = field(default_factory=list)


def _register_primary() -> None:
    from hydra.core.config_store import ConfigStore

    register_schema()
    ConfigStore.instance().store(
        name=PRIMARY_NAME,
        node={"defaults": [SCHEMA_NAME, {"recipe": DEFAULT_RECIPE}, "_self_"]},
    )


def compose(overrides: list[str]) -> Composed:
    """Compose one point; raises ConfigError (exit 2) on any composition problem."""
    store_all()
    _register_primary()
    GlobalHydra.instance().clear()
    try:
        with initialize(version_base="1.3", config_path=None, job_name="launcher"):
            cfg = hydra_compose(config_name=PRIMARY_NAME, overrides=list(overrides), return_hydra_config=True)
            choices = {k: str(v) for k, v in cfg.hydra.runtime.choices.items() if k in ("recipe", "cluster", "model")}
            with open_dict(cfg):
                del cfg["hydra"]
            config = OmegaConf.to_object(cfg)
    except Exception as exc:  # noqa: BLE001 - every Hydra/OmegaConf failure is translated
        raise translate(exc, overrides) from None
    finally:
        GlobalHydra.instance().clear()
    return Composed(config=config, cfg=cfg, choices=choices, overrides=list(overrides))
