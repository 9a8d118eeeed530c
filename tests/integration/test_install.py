"""The launcher as users install it (issue 28): a wheel built from this tree, installed outside the
checkout and run from another folder, and the pre-commit hook run from a team's own repository.

The stories that failed before, now tests:
- a checks-only install (`pip install` of the base package: hydra-core, omegaconf, pyyaml, no torch)
  finds the shipped recipes, clusters, model descriptors and sample data through the package, so
  `launcher validate --all` and `plan` of every shipped recipe work from an empty folder;
- a team repository holding only its own recipes, one starting from a shipped recipe on a shipped
  cluster (`defaults: [/recipe/dapo_sync@_here_]`) and one with an illegal mesh, commits under the
  real `pre-commit` with this repository's hook: the legal commit passes, the illegal one is
  refused with its findings.
The laptop demo's first steps need torch and Ray, which take minutes to install; that part installs
the wheel (--no-deps) into a venv that sees this venv's packages through a .pth line (which, unlike
a site folder, runs none of that venv's .pth files, so its editable finder stays off and `launcher`
is the wheel's copy: checked). The wheel is built as `python -m build` does (an sdist, then the wheel
from it), with this venv's setuptools, so MANIFEST.in and setup.py's hook are both exercised.
"""
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PYTHON = Path(sys.executable)
TREES = ("recipes", "clusters", "model/descriptors", "data")
DEMO = ["recipe=tiny_grpo_chat", "run.steps=2", "algorithm.prompts_per_step=4", "algorithm.mini_batch_prompts=4",
        "algorithm.samples_per_prompt=8", "run.eval_every_steps=2", "run.eval_problems=8", "run.eval_samples=2",
        "checkpoint.every_steps=0"]
# validate --all and plan of every shipped recipe in one process, then the heavy modules they loaded.
CHECK_EVERY_RECIPE = """
import contextlib, io, sys
from launcher.__main__ import main
from launcher.config.files import available
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # plan's `wrote ...`
    codes = {"validate --all": int(main(["validate", "--all"]))}
    codes.update({r: int(main(["plan", f"recipe={r}"])) for r in sorted(available("recipe"))})
print(codes)
print(sorted({"torch", "ray", "vllm", "megatron", "transformers"} & set(sys.modules)))
"""
# What cluster.ship_code sends to a Ray cluster from this install: each py_modules folder zipped as Ray
# does, then a task on a local Ray with that runtime_env: where its worker imports the launcher from.
SHIPPED_CODE = """
import tempfile, zipfile
from pathlib import Path
import ray
from launcher.config.schema.cluster import ClusterConfig
from launcher.driver.actors.cluster import shipped_code
from ray._private.runtime_env.packaging import create_package
env = shipped_code(ClusterConfig(ray_address="10.1.2.3:6379"))
print(sorted(env))
for folder in env["py_modules"]:
    target = Path(tempfile.mkdtemp()) / "code.zip"
    create_package(folder, target, include_gitignore=True, include_parent_dir=True, excludes=env["excludes"])
    print(folder, target.stat().st_size, " ".join(zipfile.ZipFile(target).namelist()))

@ray.remote
def where():
    import model
    from launcher import paths
    return [paths.__file__, model.__file__, str(paths.resolve_data_path("data/tiny_tokenizer/tokenizer.json"))]

ray.init(address="local", num_cpus=1, include_dashboard=False, runtime_env=env, logging_level="ERROR")
print(" ".join(ray.get(where.remote())))
ray.shutdown()
"""
TEAM_LEGAL = """# Our run: the launcher's dapo_sync on its b300x2 cluster, nothing copied from the launcher.
defaults:
  - /recipe/dapo_sync@_here_
  - _self_
run:
  name: my_dapo
  steps: 10
"""
TEAM_ILLEGAL = """defaults:
  - /recipe/dapo_sync@_here_
  - override /cluster: h200x1
  - _self_
trainer:
  mesh:
    tp: 3
"""


GIT = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
"""git without the user's or the machine's config (signing, hooks paths, default branch)."""


def _env(**extra: str) -> dict[str, str]:
    """This environment without what would point a child at the checkout or at extra config roots."""
    env = {k: v for k, v in os.environ.items() if k not in ("LAUNCHER_CONFIG_ROOTS", "PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def _run(cmd: list, cwd: Path, timeout_s: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=_env(**env), capture_output=True, text=True,
                          timeout=timeout_s)


def _ok(cmd: list, cwd: Path, **env: str) -> str:
    out = _run(cmd, cwd, **env)
    assert out.returncode == 0, f"{cmd}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("install")


@pytest.fixture(scope="module")
def elsewhere(work) -> Path:
    """An empty folder outside the checkout, where the installed launcher is run."""
    folder = work / "elsewhere"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def source(work) -> tuple[Path, str]:
    """This working tree (what git tracks or would track) as a one-commit repository: (folder, commit).
    The wheel is built from it and pre-commit clones it at that commit."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    folder = work / "source"
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    _ok(["git", "init", "-q"], folder, **GIT)
    _ok(["git", "add", "-A"], folder, **GIT)
    _ok(["git", "commit", "-q", "-m", "snapshot"], folder, **GIT)
    return folder, _ok(["git", "rev-parse", "HEAD"], folder, **GIT).strip()


@pytest.fixture(scope="module")
def wheel(source, work) -> Path:
    folder, dist = source[0], work / "dist"
    _ok([PYTHON, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(dist)!r})"], folder)
    (sdist,) = dist.glob("*.tar.gz")
    _ok([PYTHON, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, sdist], work)
    (built,) = dist.glob("*.whl")
    return built


def _venv(folder: Path) -> Path:
    """A fresh venv of this Python without pip of its own (this venv's pip installs into it); its bin folder."""
    _ok([PYTHON, "-m", "venv", "--without-pip", folder], folder.parent)
    return folder / "bin"


def _pip_install(bin_dir: Path, *args: str | Path) -> None:
    _ok([PYTHON, "-m", "pip", "--python", bin_dir / "python", "install", "-q", *args], bin_dir)


@pytest.fixture(scope="module")
def checks(wheel, work) -> Path:
    """The checks-only install: the wheel and its base dependencies from the package index."""
    bin_dir = _venv(work / "checks")
    _pip_install(bin_dir, wheel)
    return bin_dir


@pytest.fixture(scope="module")
def demo(wheel, work) -> Path:
    """The wheel alone (--no-deps), with torch, Ray and the rest of the RL stack seen from this venv."""
    bin_dir = _venv(work / "demo")
    site = _ok([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work).strip()
    (Path(site) / "rl_stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _pip_install(bin_dir, "--no-deps", wheel)
    return bin_dir


def test_the_wheel_carries_each_shipped_file_once(wheel, source):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(str(p.relative_to(source[0])) for tree in TREES for p in (source[0] / tree).rglob("*")
                     if p.is_file())
    assert len(shipped) >= 30
    assert sorted(n.removeprefix("launcher/_shipped/") for n in names if n.startswith("launcher/_shipped/")) == shipped
    assert [n for n in names if n.endswith((".yaml", ".parquet", ".jsonl")) and "_shipped" not in n] == []
    assert wheel.stat().st_size < 2**20


def test_a_checks_only_install_validates_the_shipped_recipes_from_any_folder(checks, elsewhere):
    assert _run([checks / "python", "-c", "import torch"], elsewhere).returncode == 1  # no RL stack here
    version = _ok([checks / "launcher", "--version"], elsewhere)
    assert version.startswith("glm5-rl-launcher 0.1.0 (configs: ") and f"{checks.parent}/lib/" in version
    everything = _ok([checks / "launcher", "validate", "--all"], elsewhere)
    assert everything.count(" 0 error(s)") == everything.count("error(s)") >= 9
    assert "recipe=dapo_sync [dapo_sync on b300x2]: 0 error(s)" in _ok([checks / "launcher", "validate",
                                                                        "recipe=dapo_sync"], elsewhere)
    unknown = _run([checks / "launcher", "validate", "recipe=nope"], elsewhere)
    assert unknown.returncode == 2 and "launcher/_shipped: dapo_async, dapo_fullft" in unknown.stdout


def test_a_checks_only_install_plans_every_shipped_recipe(checks, elsewhere):
    codes = _ok([checks / "python", "-c", CHECK_EVERY_RECIPE], elsewhere).splitlines()[-2]
    assert codes.count(": 0") == codes.count(":") >= 10, codes
    assert (elsewhere / "runs" / "tiny_grpo_chat" / "plan.json").is_file()


def test_validate_and_plan_import_neither_torch_nor_ray(demo, elsewhere):
    """With the RL stack importable, every check and plan still leaves it unloaded."""
    codes, heavy = _ok([demo / "python", "-c", CHECK_EVERY_RECIPE], elsewhere).splitlines()[-2:]
    assert codes.count(": 0") == codes.count(":") >= 10, codes
    assert heavy == "[]"


def test_the_laptop_demo_runs_its_first_steps_from_the_wheel(demo, elsewhere, work):
    where = _ok([demo / "python", "-c", "import launcher.paths as p; print(p.__file__, p.shipped_root())"], elsewhere)
    assert where.startswith(str(demo.parent)) and where.split()[1].endswith("launcher/_shipped")
    out = _ok([demo / "launcher", *DEMO, f"run.output_dir={work / 'runs'}"], elsewhere)
    assert "data.train_path=data/copy_train.parquet: kept 1,500 of 1,500 prompts" in out
    assert "step    2/2 |" in out and "done: 2 steps" in out


def test_a_ray_cluster_gets_the_installed_packages_not_site_packages(demo, elsewhere):
    """cluster.ship_code from a wheel install: py_modules of launcher (with _shipped/) and model, and a
    worker imports those copies and finds the shipped sample data in them."""
    out = _run([demo / "python", "-c", SHIPPED_CODE], elsewhere)
    assert out.returncode == 0, out.stderr[-3000:]
    keys, *modules, worker = out.stdout.splitlines()[-4:]
    assert keys == "['excludes', 'py_modules']", keys
    zips = {Path(folder).name: (folder, int(size), names.split()) for folder, size, names in
            (line.split(" ", 2) for line in modules)}
    assert sorted(zips) == ["launcher", "model"]
    assert all(folder.startswith(str(demo.parent)) for folder, _, _ in zips.values())
    launcher_files, model_files = zips["launcher"][2], zips["model"][2]
    assert {"launcher/paths.py", "launcher/_shipped/recipes/tiny_grpo_chat.yaml",
            "launcher/_shipped/data/copy_train.parquet"} <= set(launcher_files)
    assert "model/names.py" in model_files and not any("__pycache__" in n for n in launcher_files + model_files)
    assert sum(size for _, size, _ in zips.values()) < 4 * 2**20
    paths_file, model_file, tokenizer = worker.split()
    assert "/runtime_resources/py_modules_files/" in paths_file and paths_file.endswith("/launcher/paths.py")
    assert "/runtime_resources/py_modules_files/" in model_file
    assert tokenizer == str(Path(paths_file).parent / "_shipped/data/tiny_tokenizer/tokenizer.json")


def test_pre_commit_checks_a_team_repository_against_the_shipped_trees(source, work):
    team = work / "team"
    (team / "recipes").mkdir(parents=True)
    (team / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {source[0]}\n    rev: {source[1]}\n    hooks:\n      - id: validate-recipes\n")
    (team / "recipes" / "my_dapo.yaml").write_text(TEAM_LEGAL)
    env = {**GIT, "PRE_COMMIT_HOME": str(work / "pre-commit-home")}
    _ok(["git", "init", "-q"], team, **env)
    _ok([PYTHON.parent / "pre-commit", "install"], team, **env)
    _ok(["git", "add", "-A"], team, **env)
    legal = _ok(["git", "commit", "-m", "our dapo recipe"], team, **env)  # installs the hook's venv: pip install
    assert "validate RL recipes (GLM-5.3-Flash launcher)" in legal and "Passed" in legal
    (team / "recipes" / "bad_mesh.yaml").write_text(TEAM_ILLEGAL)
    _ok(["git", "add", "-A"], team, **env)
    refused = _run(["git", "commit", "-m", "a mesh that cannot be"], team, **env)
    illegal = refused.stdout + refused.stderr  # git hands a hook's output to its stderr
    assert refused.returncode == 1 and "Failed" in illegal, illegal[-3000:]
    assert "recipe=bad_mesh [bad_mesh on h200x1]: " in illegal
    assert "[ERROR MESH001] trainer.mesh.tp: 1 trainer GPUs do not divide by tp 3" in illegal
    assert "recipe=my_dapo [my_dapo on b300x2]: 0 error(s)" in illegal
    assert "recipe=dapo_sync " not in illegal  # the team's recipes only
    assert _ok(["git", "log", "--format=%s"], team, **env).split("\n")[0] == "our dapo recipe"
