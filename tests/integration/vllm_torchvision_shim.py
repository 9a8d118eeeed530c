"""TEST-ONLY stand-in for the one torchvision import between vLLM's Glm5Next and a CPU venv.

Why it exists: vllm.models.glm5next imports vllm/model_executor/models/glm4_1v.py, which
imports transformers' glm4v/image_processing_glm4v.py, whose line 19 runs
`from torchvision.transforms.v2 import functional as tvF` unguarded. .venv-vllm has no
torchvision, and none can be had for its torch 2.13.0+cpu: PyPI and the local indexes hold
only CUDA builds (whose _C.so needs libtorch_cuda.so, so `import torchvision` fails with
`operator torchvision::nms does not exist`), torchvision publishes no sdist on PyPI, and the
CPU builds (download.pytorch.org) and the git source are unreachable from this machine.

What it covers: only that import. `torchvision`, `torchvision.transforms`,
`torchvision.transforms.v2` and `...v2.functional` are empty modules; any attribute of
`functional` raises. transformers is asked first (is_torchvision_available, cached), so it
still sees torchvision as absent and skips every guarded torchvision import; the image
processor classes stay torchvision-only and refuse to run. The text model never calls
image processing, and the shim is removed again once the import is done.
"""
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from contextlib import contextmanager

PACKAGES = ("torchvision", "torchvision.transforms", "torchvision.transforms.v2")
FUNCTIONAL = "torchvision.transforms.v2.functional"


def _refuse(attr: str):
    raise AttributeError(f"{FUNCTIONAL}.{attr}: torchvision is a test shim here "
                         "(tests/integration/vllm_torchvision_shim.py); image processing is not available")


def _module(name: str, package: bool) -> types.ModuleType:
    module = types.ModuleType(name, "test shim: tests/integration/vllm_torchvision_shim.py")
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=package)
    if package:
        module.__path__ = []
    return module


@contextmanager
def torchvision_shim():
    """Within it, the shim modules import; a real torchvision, when installed, is used instead."""
    if importlib.util.find_spec("torchvision") is not None:
        yield
        return
    from transformers.utils import is_torchvision_available

    assert not is_torchvision_available()  # cached False before the shim shows up
    modules = {name: _module(name, True) for name in PACKAGES}
    modules[FUNCTIONAL] = _module(FUNCTIONAL, False)
    modules[FUNCTIONAL].__getattr__ = _refuse
    modules[PACKAGES[-1]].functional = modules[FUNCTIONAL]
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name in modules:
            sys.modules.pop(name, None)


def import_glm5next() -> types.ModuleType:
    """vllm.models.glm5next, imported with the shim in place."""
    with torchvision_shim():
        return importlib.import_module("vllm.models.glm5next")
