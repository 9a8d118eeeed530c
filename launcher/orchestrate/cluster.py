"""Start or join Ray for one run, and always leave nothing behind.

Embedded mode (cluster.ray_address null) always starts a private Ray on this machine
(`address="local"`): a cluster that `ray start` brought up here (most GPU nodes), found
through RAY_ADDRESS or Ray's `ray_current_cluster` file, is neither joined nor disturbed. When it
has no GPU, the cluster's GPUs become a custom resource (`logical_gpu`) and each logical
node a resource `node_<i>` holding its GPUs, so placement (colocated vs disjoint nodes)
is enforced by Ray exactly as on a real cluster. Every worker gets the plan's environment.

Secret variables (launcher.secrets.is_secret_name: WANDB_API_KEY, HF_TOKEN, ...) never go
through `runtime_env`: Ray writes a job's runtime_env in clear into its session logs
(runtime_env_agent.log, world-readable). They are handed to each actor as a constructor
argument instead (`secret_worker_env()`, read by orchestrate/groups.py), which Ray keeps in
memory and never logs, and which works on every node of a remote cluster (a file would not).
"""
import contextlib
import logging
import os
import sys

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


@contextlib.contextmanager
def ray_session(config, plan_env: dict[str, str]):
    """ray.init for this run; ray.shutdown on exit (success, error or Ctrl-C)."""
    import ray

    public, secret = split_secret_env(worker_env(plan_env))
    runtime_env = {"env_vars": public}
    embedded = config.cluster.ray_address is None
    if embedded:
        sys.stdout.write("embedded Ray: starting a private instance on this machine (any Ray cluster running "
                         "here is not joined; set cluster.ray_address to use one)\n")
        ray.init(address="local", resources=_embedded_resources(config.cluster), num_cpus=os.cpu_count(),
                 include_dashboard=False, runtime_env=runtime_env, logging_level=logging.WARNING,
                 namespace=f"launcher-{config.run.name}")
    else:
        ray.init(address=config.cluster.ray_address, runtime_env=runtime_env, logging_level=logging.WARNING,
                 namespace=f"launcher-{config.run.name}")
    _session_secrets.clear()
    _session_secrets.update(secret)
    try:
        yield embedded
    finally:
        _session_secrets.clear()
        ray.shutdown()
