"""Dotted key paths and expected types of the schema, for error messages and docs."""
import dataclasses
import enum
import functools
import typing

from launcher.config.schema.root import LauncherConfig


def _unwrap_optional(tp):
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is typing.Union and len(args) == 1:
        return args[0], True
    return tp, False


def type_name(tp) -> str:
    """Human name of a field type: `int`, `one of [a, b]`, `list of str`, `int or null`."""
    inner, optional = _unwrap_optional(tp)
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        name = "one of [" + ", ".join(m.name for m in inner) + "]"
    elif typing.get_origin(inner) in (list, list):
        name = "list of " + type_name(typing.get_args(inner)[0])
    elif typing.get_origin(inner) in (dict, dict):
        name = "mapping of str to " + type_name(typing.get_args(inner)[1])
    else:
        name = getattr(inner, "__name__", str(inner))
    return f"{name} or null" if optional else name


@functools.cache
def schema_fields() -> dict[str, object]:
    """Every leaf and section key of the schema ("trainer.mesh.tp") -> its type."""
    out: dict[str, object] = {}

    def walk(cls, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            tp = hints[f.name]
            out[key] = tp
            inner, _ = _unwrap_optional(tp)
            if dataclasses.is_dataclass(inner):
                walk(inner, key + ".")

    walk(LauncherConfig, "")
    return out
