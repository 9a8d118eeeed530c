"""data.environment.cls as the run's start loads it: "package.module:Class" imported on the driver and
checked against SkyRL-Gym's BaseTextEnv interface (init and step). validate's ENV001 runs the
same function in a child process, so what it accepts loads."""
import importlib
import inspect

KEY = "data.environment.cls"


class EnvError(ValueError):
    """data.environment.cls cannot be used: the module does not import, or the class does not fit the interface."""


def load_env_class(spec: str) -> type:
    """Import "module:Class" once; EnvError naming the key, module and class."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise EnvError(f"{KEY}={spec!r} is not of the form 'package.module:Class'")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - any import-time failure of user code, with its cause
        raise EnvError(f"{KEY}={spec!r}: cannot import module {module_name!r} ({type(err).__name__}: {err}); it is "
                       "looked up on the driver's sys.path (the current directory and PYTHONPATH)") from err
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise EnvError(f"{KEY}={spec!r}: module {module_name!r} has no class {name!r}")
    missing = [m for m in ("init", "step") if not callable(getattr(cls, m, None))]
    if missing:
        raise EnvError(f"{KEY}={spec!r}: {name} has no {' or '.join(missing)} method (SkyRL-Gym's BaseTextEnv "
                       "interface: init(prompt_messages) and step(model_text) -> observations, reward, done, metadata)")
    try:
        inspect.signature(cls).bind({}, {})
    except TypeError as err:
        raise EnvError(f"{KEY}={spec!r}: {name}(env_config, extras) cannot be called ({err}): the run builds one "
                       "per episode that way (SkyRL-Gym's BaseTextEnv)") from err
    except ValueError:  # no signature to read (a C type): its first episode will tell
        pass
    return cls
