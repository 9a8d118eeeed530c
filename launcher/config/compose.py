"""Compose a typed run config from the recipe tree and command-line overrides.

Uses Hydra's Compose API (the same defaults-list and override grammar as @hydra.main)
so the launcher controls the error path: every composition failure becomes a finding
with the full key, the value and the fix, and nothing is written before that succeeds.
Sizes, counts and lengths outside their range (schema/ranges.py) are composition errors too.
A sweep composes its points through launcher/config/compose_points.py, which shares composed_from,
every step after Hydra's, with compose().

With `model.hf_path` set, the checkpoint's config.json is the architecture: its values
replace `model.arch`'s (in the typed object and the DictConfig that is printed and written),
and the values the descriptor, recipe and command line set are kept aside in
`model.declared_arch` for MODEL006 to compare.
"""
from collections.abc import Callable
from dataclasses import dataclass, field

from hydra import compose as hydra_compose
from hydra import initialize
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict

from launcher.config.compose_errors import translate, unknown_keys
from launcher.config.files import store_all
from launcher.config.model_folder import ARCH_FIELDS, NULL_MEANS_HF_DEFAULT, arch_values
from launcher.config.schema import SCHEMA_NAME, LauncherConfig, register_schema
from launcher.config.schema.ranges import range_findings
from launcher.errors import ConfigError

DEFAULT_RECIPE = "tiny_grpo_chat"
PRIMARY_NAME = "launcher"
PROBE_NAME = "launcher_arch_probe"
"""Primary config whose schema has every model.arch field missing (`???`): composing it with the
same overrides shows which fields the descriptor, recipe and command line set."""


@dataclass
class Composed:
    """A composed run: the typed object rules read, the DictConfig we print, and provenance."""

    config: LauncherConfig
    cfg: DictConfig
    choices: dict[str, str]
    overrides: list[str] = field(default_factory=list)


def register_primary() -> None:
    """Store the recipe tree, the schema and the primary config in Hydra's ConfigStore (files re-read when
    changed): what every composition reads."""
    store_all()
    register_schema()
    ConfigStore.instance().store(
        name=PRIMARY_NAME,
        node={"defaults": [SCHEMA_NAME, {"recipe": DEFAULT_RECIPE}, "_self_"]},
    )


def _register_probe() -> None:
    store = ConfigStore.instance()
    if f"{PROBE_NAME}.yaml" in store.list(""):
        return
    schema = OmegaConf.structured(LauncherConfig)
    for name in ARCH_FIELDS:
        schema.model.arch[name] = MISSING
    store.store(name=f"{PROBE_NAME}_schema", node=schema)
    store.store(name=PROBE_NAME, node={"defaults": [f"{PROBE_NAME}_schema", {"recipe": DEFAULT_RECIPE}, "_self_"]})


ComposePrimary = Callable[[str], tuple[DictConfig, dict[str, str]]]
"""Primary config name -> (composed DictConfig without the `hydra` node, recipe/cluster/model choices).
compose() runs Hydra for every call; launcher.config.compose_points reuses one Hydra composition per set of
group choices. Both hand it to composed_from, the one pipeline from there on."""


def hydra_compose_choices(primary: str, overrides: list[str]) -> tuple[DictConfig, dict[str, str]]:
    """Hydra's composition of `primary` with `overrides`: the config (the `hydra` node taken off) and choices."""
    GlobalHydra.instance().clear()
    try:
        with initialize(version_base="1.3", config_path=None, job_name="launcher"):
            cfg = hydra_compose(config_name=primary, overrides=list(overrides), return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()
    choices = {k: str(v) for k, v in cfg.hydra.runtime.choices.items() if k in ("recipe", "cluster", "model")}
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices


def compose(overrides: list[str]) -> Composed:
    """Compose one point with Hydra; raises ConfigError (exit 2) on any composition problem."""
    register_primary()
    return composed_from(lambda primary: hydra_compose_choices(primary, overrides), overrides)


def composed_from(compose_primary: ComposePrimary, overrides: list[str]) -> Composed:
    """The post-compose steps every path shares: schema typing, the checkpoint's arch, range checks.

    Every Hydra/OmegaConf failure on the way becomes one finding (translate), an out-of-range
    value one finding each (CFG007), so a point composed either way reports the same findings."""
    try:
        cfg, choices = compose_primary(PRIMARY_NAME)
        added = unknown_keys(cfg)
        if added:
            raise ConfigError(added)
        config = OmegaConf.to_object(cfg)
        if config.model.hf_path is not None:
            config = _apply_checkpoint_arch(cfg, config, compose_primary)
    except Exception as exc:  # noqa: BLE001 - every Hydra/OmegaConf failure is translated
        raise translate(exc, overrides) from None
    out_of_range = range_findings(config)
    if out_of_range:
        raise ConfigError(out_of_range)
    return Composed(config=config, cfg=cfg, choices=choices, overrides=list(overrides))


def _declared_arch_fields(compose_primary: ComposePrimary) -> list[str]:
    """model.arch fields set by the descriptor, the recipe or the command line (not schema defaults).

    A second composition with every arch field missing in the schema: whatever is no longer
    missing was set by some file or override. Only runs with model.hf_path set (~70 ms a Hydra
    composition; a sweep's PointComposer composes it once per set of group choices).
    A null on a field where null means "HF's default" claims nothing and does not count."""
    _register_probe()
    probe = compose_primary(PROBE_NAME)[0].model.arch
    return [name for name in ARCH_FIELDS if not OmegaConf.is_missing(probe, name)
            and not (name in NULL_MEANS_HF_DEFAULT and probe[name] is None)]


def _apply_checkpoint_arch(cfg: DictConfig, config: LauncherConfig, compose_primary: ComposePrimary) -> LauncherConfig:
    """The checkpoint's architecture into cfg.model.arch and config.model.arch, the declared values aside.

    A config.json that cannot be read changes nothing here: MODEL003 reports it."""
    values = arch_values(config.model.hf_path)
    if values is None:
        return config
    declared = {name: getattr(config.model.arch, name) for name in _declared_arch_fields(compose_primary)}
    for name, value in values.items():
        cfg.model.arch[name] = value
    config.model.arch = OmegaConf.to_object(cfg.model.arch)
    config.model.declared_arch = declared  # a plain dict: the config is pickled to Ray workers
    return config
