"""Backend registries. Backends live in subpackages of launcher.workers and register on
import; discovery imports the subpackage named like the requested backend (else every
subpackage), so core code never names one.

A subpackage whose optional dependency is missing (megatron-core, vllm on a CPU box)
must not break the others: its import error is kept and shown when that name is asked for.
"""
import importlib
import pkgutil

from launcher.registry import Registry, UnknownNameError

_import_errors: dict[str, str] = {}


def _import(package: str, sub: str) -> None:
    if sub not in _import_errors:
        try:
            importlib.import_module(f"{package}.{sub}")
        except ImportError as err:
            _import_errors[sub] = str(err)


def _discover(name: str | None) -> None:
    """The subpackage named like the backend first (megatron-core and vllm are slow to
    import and never needed by a run that uses other backends), then every subpackage."""
    import launcher.workers as package

    subpackages = [info.name for info in pkgutil.iter_modules(package.__path__) if info.ispkg]
    for sub in [name] if name in subpackages else subpackages:
        _import(package.__name__, sub)


TRAINERS: Registry = Registry("trainer backend", _discover)
ENGINES: Registry = Registry("inference backend", _discover)


def _lookup(registry: Registry, name: str):
    try:
        return registry.get(name)
    except UnknownNameError as err:
        if name in _import_errors:
            raise UnknownNameError(f"{registry.kind} {name!r} could not be imported: {_import_errors[name]}") from err
        raise


def trainer_class(name: str):
    """The trainer backend class registered as `name` (config.trainer.backend)."""
    return _lookup(TRAINERS, name)


def engine_class(name: str):
    """The inference backend class registered as `name` (config.inference.backend)."""
    return _lookup(ENGINES, name)
