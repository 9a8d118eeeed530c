"""The package layers import one way, and no module reaches into another package's privates.

Layers, bottom to top (a module may import its own package and any layer below it):
the foundation modules directly under launcher/ (errors, registry, paths, secrets), config,
rl (the maths both sides share), envs (the tool-use environments of multi-turn episodes), plan,
validate, search, contract (what driver and workers exchange, which carries the plan),
weight_sync (the trainer's export, the engines' receive, the driver's pump and one plug-in per
transport: the backends build on it, the driver calls it), workers, driver, cli, and
launcher/__main__.py.

A private module (a name starting with `_`) belongs to the folder it sits in: only modules
in that folder import it. Tests, benchmarks, the device harness and scripts are outside every
folder of launcher/, so they use public modules only, and neither benchmarks nor the device
harness import anything from tests/.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["", "config", "rl", "envs", "plan", "validate", "search", "contract", "weight_sync", "workers", "driver", "cli",
          "__main__"]
"""`""` is the foundation: the leaf modules directly under launcher/."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in the file, `from a import b` giving a.b."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "launcher" or len(parts) == 1:
        return ""
    return "__main__" if parts[1] == "__main__" else (parts[1] if (ROOT / "launcher" / parts[1]).is_dir() else "")


def _private_owner(module: str) -> str | None:
    """The folder (dotted) that owns `module` if some component of it is private, else None."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__") and _exists(parts[: i + 1]):
            return ".".join(parts[:i])
    return None


def _exists(parts: list[str]) -> bool:
    base = ROOT.joinpath(*parts)
    return base.is_dir() or base.with_suffix(".py").is_file()


def _python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_layers_import_downward_only():
    wrong = []
    for path in _python_files("launcher"):
        here = _module_name(path)
        rank = LAYERS.index(_layer(here))
        for line, target in _imports(path):
            if target.startswith("launcher.") and _exists(target.split(".")):
                there = _layer(target)
                if there != _layer(here) and LAYERS.index(there) > rank:
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target} ({there!r} is above {_layer(here)!r})")
    assert not wrong, "imports from a higher layer:\n" + "\n".join(wrong)


DRIVER_WINGS = ["records", "actors", "loop", ""]
"""launcher/driver's wings, bottom to top: the run's records on disk, the Ray side (cluster,
placement, actor groups, deadlines, start-up), the step loop; `""` the commands over them,
directly under driver/ (launch, export, eval)."""


def _wing(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) >= 3 and parts[2] in DRIVER_WINGS else ""


def test_driver_wings_import_downward_only():
    wrong = []
    for path in _python_files("launcher/driver"):
        here = _wing(_module_name(path))
        for line, target in _imports(path):
            if target.startswith("launcher.driver.") and _exists(target.split(".")):
                there = _wing(target)
                if DRIVER_WINGS.index(there) > DRIVER_WINGS.index(here):
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target} ({there!r} is above {here!r})")
    assert not wrong, "driver imports from a higher wing:\n" + "\n".join(wrong)


def test_no_module_imports_another_folders_private_module():
    wrong = []
    for path in _python_files("launcher", "tests", "benchmarks", "device", "scripts", "model"):
        folder = _module_name(path).rpartition(".")[0] if path.name != "__init__.py" else _module_name(path)
        for line, target in _imports(path):
            owner = _private_owner(target) if target.split(".")[0] in ("launcher", "model") else None
            if owner is not None and owner != folder:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "private modules used outside their folder:\n" + "\n".join(wrong)


def test_benchmarks_do_not_import_tests():
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {target}" for path in _python_files("benchmarks", "device")
             for line, target in _imports(path) if target.split(".")[0] == "tests"]
    assert not wrong, "\n".join(wrong)


def test_the_checks_catch_what_they_guard(tmp_path):
    """The helpers flag a real upward import and a real private import (so the checks can fail)."""
    assert LAYERS.index(_layer("launcher.driver.launch")) > LAYERS.index(_layer("launcher.plan"))
    assert _layer("launcher.errors") == "" and _layer("launcher.workers.hf.engine") == "workers"
    assert _wing("launcher.driver.launch") == "" and _wing("launcher.driver.loop.step") == "loop"
    assert DRIVER_WINGS.index(_wing("launcher.driver.records.rundir")) < DRIVER_WINGS.index("actors")
    assert LAYERS.index("contract") < LAYERS.index(_layer("launcher.weight_sync.pump")) < LAYERS.index("workers")
    assert _private_owner("launcher.workers.vllm._model_dir") == "launcher.workers.vllm"
    assert _private_owner("launcher.workers.hf.engine") is None and _private_owner("launcher.workers.hf._gone") is None
    probe = tmp_path / "probe.py"
    probe.write_text("from launcher.workers.hf._lora import x\nimport launcher.driver.launch\n")
    assert [t for _, t in _imports(probe)] == ["launcher.workers.hf._lora", "launcher.workers.hf._lora.x",
                                               "launcher.driver.launch"]


def test_model_imports_nothing_from_launcher():
    """model/ (the architecture, its Megatron implementation, the name table) is the bottom layer:
    the launcher builds on it, never the other way round."""
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {target}" for path in _python_files("model")
             for line, target in _imports(path) if target.split(".")[0] == "launcher"]
    assert not wrong, "\n".join(wrong)


def _module_graph(*folders: str) -> dict[str, set[str]]:
    """module -> the project modules it imports (at any depth of the file, lazy imports included)."""
    graph: dict[str, set[str]] = {}
    for path in _python_files(*folders):
        here = _module_name(path)
        graph[here] = {t for _, t in _imports(path) if t.split(".")[0] in folders and _exists(t.split("."))
                       and t != here and not here.startswith(t + ".")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    return next((c for node in sorted(graph) if node not in state and (c := visit(node))), None)


def test_no_import_cycles_between_modules():
    assert _cycle(_module_graph("launcher", "model")) is None


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
