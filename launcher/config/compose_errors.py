"""Turn Hydra/OmegaConf composition exceptions into findings a user can act on.

Hydra's own messages are correct but terse ("Key 'tpp' not in 'MeshConfig'"); users
need the full dotted key, the closest valid key, the expected type and the choices.
"""
import dataclasses
import difflib
import re

from hydra.errors import MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ConfigTypeError, OmegaConfBaseException, ValidationError

from launcher.config.files import BROKEN, available, in_root
from launcher.config.schema.keys import schema_fields, type_name
from launcher.errors import ConfigError, Finding
from launcher.paths import GROUP_DIRS, config_roots


def _closest_key(full_key: str) -> str | None:
    keys = list(schema_fields())
    parent = full_key.rpartition(".")[0]
    siblings = [k for k in keys if k.rpartition(".")[0] == parent]
    match = difflib.get_close_matches(full_key, siblings, n=1, cutoff=0.5)
    match = match or difflib.get_close_matches(full_key, keys, n=1, cutoff=0.6)
    return match[0] if match else None


def _source_file(exc: Exception) -> str:
    """`In 'recipe/typo': ...` -> ` (in recipes/typo.yaml)` when Hydra names the config."""
    match = re.match(r"In '(recipe|cluster|model)/([^']+)'", str(exc))
    if not match:
        return ""
    path = available(match.group(1)).get(match.group(2))
    return f" (in {path})" if path else ""


def _unknown_key(full_key: str, where: str = "") -> Finding:
    near = _closest_key(full_key)
    hint = f" Did you mean `{near}`?" if near else ""
    return Finding(
        id="CFG001", severity="error", key=full_key,
        message=f"Unknown config key `{full_key}`{where}.{hint}",
        why="The schema has no such key, so the value would be silently ignored by any looser tool.",
        fix=f"Use `{near}`." if near else "Check the key against the schema (`python -m launcher --help`).",
    )


def _deleted_key(full_key: str) -> Finding:
    return Finding(
        id="CFG001", severity="error", key=full_key,
        message=f"`~{full_key}` removes a key the schema defines; schema keys cannot be removed.",
        why="Every schema key always exists so that every rule and worker reads a defined value.",
        fix=f"Set it instead: `{full_key}=VALUE` (or `{full_key}=null` where null is allowed).",
    )


def unknown_keys(cfg: DictConfig, prefix: str = "") -> list[Finding]:
    """Keys added to a typed section (`+trainer.mesh.foo=1` lifts Hydra's struct check), each
    as an unknown-key finding; free-form dict sections (`env`) take any key."""
    findings = []
    schema = OmegaConf.get_type(cfg)
    declared = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
    for key in cfg.keys():
        full_key = f"{prefix}{key}"
        if declared is not None and key not in declared:
            findings.append(_unknown_key(full_key))
            continue
        child = cfg._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            findings.extend(unknown_keys(child, f"{full_key}."))
    return findings


def _wrong_type(exc: ValidationError, where: str = "") -> Finding:
    key = str(exc.full_key)
    expected = type_name(schema_fields()[key]) if key in schema_fields() else "the schema's type"
    return Finding(
        id="CFG002", severity="error", key=key,
        message=f"`{key}`{where} got {exc.value!r} ({type(exc.value).__name__}); expected {expected}. "
                f"({str(exc.msg).splitlines()[0]})",
        why="Typed keys are checked when the config is composed so a wrong value never reaches a worker.",
        fix=f"Set `{key}` to a value of type {expected}.",
    )


def _missing_config(exc: MissingConfigException) -> Finding:
    group, _, name = str(exc.missing_cfg_file).rpartition("/")
    if (group, name) in BROKEN:
        return BROKEN[(group, name)].findings[0]
    if group not in ("recipe", "cluster", "model"):
        return _generic(exc)
    options = sorted(available(group))
    folder = GROUP_DIRS[group]
    return Finding(
        id="CFG003", severity="error", key=group,
        message=f"Unknown {group} `{name}`. Available {_by_root(group)}.",
        why=f"`{group}=` selects a file in the {folder}/ folder of a config root (the launcher's shipped ones, "
            f"then each LAUNCHER_CONFIG_ROOTS folder) and none holds `{name}.yaml`.",
        fix=f"Pick one of: {', '.join(options)}; or add {folder}/{name}.yaml to a root (`--root DIR` or "
            "LAUNCHER_CONFIG_ROOTS=DIR adds DIR).",
    )


def _by_root(group: str) -> str:
    """`from ROOT: a, b; from ROOT2: c`, over every config root, so a missing root is visible."""
    return "; ".join(f"from {root}: {', '.join(in_root(root, group)) or '(none)'}" for root in config_roots())


def _generic(exc: Exception) -> Finding:
    return Finding(
        id="CFG000", severity="error", key="",
        message=f"{type(exc).__name__}: {exc}",
        why="The config could not be composed.",
        fix="Correct the override or file named in the message.",
    )


def translate(exc: Exception, overrides: list[str]) -> ConfigError:
    """Map one composition exception to a ConfigError holding one finding."""
    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, MissingConfigException):
        return ConfigError([_missing_config(exc)])
    if isinstance(exc, OverrideParseException):
        return ConfigError([Finding(
            id="CFG005", severity="error", key="overrides",
            message=f"Cannot parse the overrides {overrides}: {exc}",
            why="Overrides follow Hydra's grammar `key=value` (or `group=option`).",
            fix="Write each override as key=value, e.g. trainer.mesh.tp=2.",
        )])
    cause = exc if isinstance(exc, OmegaConfBaseException) else (exc.__cause__ or exc.__context__)
    where = _source_file(exc)
    if isinstance(cause, ValidationError):
        return ConfigError([_wrong_type(cause, where)])
    if isinstance(cause, ConfigTypeError) and "does not support deletion" in str(cause) and cause.full_key:
        return ConfigError([_deleted_key(str(cause.full_key))])
    if isinstance(cause, (ConfigKeyError, AttributeError)) and getattr(cause, "full_key", None):
        return ConfigError([_unknown_key(str(cause.full_key), where)])
    return ConfigError([_generic(exc)])
