"""Start or join Ray for one run, and always leave nothing behind (ray_processes.py: a
SIGTERM during ray.init, and what a SIGKILLed driver's embedded Ray left, which the next
embedded start stops).

Embedded mode (cluster.ray_address null) always starts a private Ray on this machine
(`address="local"`): a cluster that `ray start` brought up here (most GPU nodes), found
through RAY_ADDRESS or Ray's `ray_current_cluster` file, is neither joined nor disturbed. When it
has no GPU, the cluster's GPUs become a custom resource (`logical_gpu`) and each logical
node a resource `node_<i>` holding its GPUs, so placement (colocated vs disjoint nodes)
is enforced by Ray exactly as on a real cluster. Every worker gets the plan's environment.

Secret variables (launcher.secrets.is_secret_name: WANDB_API_KEY, HF_TOKEN, ...) never go
through `runtime_env`: Ray writes a job's runtime_env in clear into its session logs
(runtime_env_agent.log, world-readable). They are handed to each actor as a constructor
argument instead (`secret_worker_env()`, read by actor_group.py), which Ray keeps in
memory and never logs, and which works on every node of a remote cluster (a file would not).
"""
import contextlib
import importlib.util
import logging
import os
import sys
from pathlib import Path

from launcher.driver.actors.ray_processes import interruptible_start, reap_dead_sessions, record_session

LOGICAL_GPU = "logical_gpu"
# Quiet, reproducible workers; the plan's environment (and the user's `env`) wins.
WORKER_DEFAULT_ENV = {"TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false",
                      "PYTHONWARNINGS": "ignore::FutureWarning,ignore::UserWarning"}


def node_resource(node: int) -> str:
    return f"node_{node}"


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def gpu_resource(embedded: bool) -> str:
    """Name of the resource a GPU slot consumes: Ray's `GPU`, or the logical one on CPU hosts."""
    return "GPU" if not embedded or _has_cuda() else LOGICAL_GPU


def worker_env(plan_env: dict[str, str]) -> dict[str, str]:
    return {**WORKER_DEFAULT_ENV, **plan_env}


def split_secret_env(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(public variables, secret variables) of one environment."""
    from launcher.secrets import is_secret_name

    public = {k: v for k, v in env.items() if not is_secret_name(k)}
    return public, {k: v for k, v in env.items() if is_secret_name(k)}


_session_secrets: dict[str, str] = {}
"""The secret variables of the open ray_session, for the actors it starts."""


def secret_worker_env() -> dict[str, str]:
    """Secret variables every actor of the open session sets in os.environ at construction."""
    return dict(_session_secrets)


def _embedded_resources(cluster_cfg) -> dict[str, float]:
    resources = {node_resource(n): float(cluster_cfg.gpus_per_node) for n in range(cluster_cfg.nodes)}
    if not _has_cuda():
        resources[LOGICAL_GPU] = float(cluster_cfg.nodes * cluster_cfg.gpus_per_node)
    return resources


# What shipped code leaves out (gitignore-style, relative to the shipped folder), besides what
# .gitignore lists (Ray honours it too): run dirs, venvs, git history, wheels, weights.
CODE_EXCLUDES = ["runs/", ".venv/", ".venv-*/", ".git/", ".whl/", ".pkgs/", "*.whl", "__pycache__/",
                 ".pytest_cache/", ".ruff_cache/", "wandb/", "outputs/", "multirun/", "*.safetensors", "*.pt",
                 "*.bin"]
CODE_PACKAGES = ("launcher", "model")
"""The packages a wheel install ships (launcher's folder carries _shipped/: recipes, clusters, sample data)."""
# Set by Ray's job supervisor in a job's driver: the job's runtime_env (its working_dir) already applies.
_RAY_JOB_CONFIG_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def package_folder(name: str) -> Path:
    """The folder an importable package is imported from, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not an importable package here")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def shipped_code(cluster_cfg) -> dict:
    """runtime_env fields that ship this launcher to every node of a Ray cluster (cluster.ship_code),
    so a worker on another host imports the driver's code and finds the shipped recipes' files.
    From a checkout (an editable install): the repository as the working_dir, so the workers run in
    its copy and its relative files (data/...) resolve there. From a wheel install, whose package sits
    in site-packages: the installed `launcher` and `model` packages as py_modules (the launcher's
    carries the shipped data in _shipped/, which launcher.paths finds on the worker too), never
    site-packages as a whole. Empty for the embedded Ray (same machine), with ship_code=false, and
    inside a Ray job (`submit`), whose own runtime_env already ships this code: Ray refuses a
    driver's second working_dir."""
    from launcher.paths import PACKAGE_DIR, checkout_root

    if cluster_cfg.ray_address is None or not cluster_cfg.ship_code or _RAY_JOB_CONFIG_VAR in os.environ:
        return {}
    checkout = checkout_root()
    if checkout is not None:
        return {"working_dir": str(checkout), "excludes": list(CODE_EXCLUDES)}
    folders = [PACKAGE_DIR if name == "launcher" else package_folder(name) for name in CODE_PACKAGES]
    return {"py_modules": [str(f) for f in folders], "excludes": list(CODE_EXCLUDES)}


@contextlib.contextmanager
def ray_session(config, plan_env: dict[str, str]):
    """ray.init for this run; ray.shutdown on exit (success, error or Ctrl-C)."""
    import ray

    public, secret = split_secret_env(worker_env(plan_env))
    runtime_env = {"env_vars": public, **shipped_code(config.cluster)}
    embedded = config.cluster.ray_address is None
    record = None
    with interruptible_start():  # SIGTERM during ray.init: everything stopped, exit 143
        if embedded:
            _reap_dead_sessions()
            sys.stdout.write("embedded Ray: starting a private instance on this machine (any Ray cluster running "
                             "here is not joined; set cluster.ray_address to use one)\n")
            ray.init(address="local", resources=_embedded_resources(config.cluster), num_cpus=os.cpu_count(),
                     include_dashboard=False, runtime_env=runtime_env, logging_level=logging.WARNING,
                     namespace=f"launcher-{config.run.name}")
        else:
            ray.init(address=config.cluster.ray_address, runtime_env=runtime_env, logging_level=logging.WARNING,
                     namespace=f"launcher-{config.run.name}")
    try:
        record = record_session() if embedded else None  # for the next run, should this driver be SIGKILLed
        _session_secrets.clear()
        _session_secrets.update(secret)
        yield embedded
    finally:
        _session_secrets.clear()
        ray.shutdown()
        if record is not None:
            record.unlink(missing_ok=True)


def _reap_dead_sessions() -> None:
    """Kill what the embedded Ray of a SIGKILLed earlier run left running, and say so."""
    killed = reap_dead_sessions()
    if killed:
        sys.stdout.write(f"stopped {len(killed)} Ray processes left by an earlier run whose driver was killed: "
                         f"{', '.join(killed)}\n")
