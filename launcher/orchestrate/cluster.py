"""Start or join Ray for one run, and always leave nothing behind.

Embedded mode (cluster.ray_address null) starts a private Ray on this machine. When it
has no GPU, the cluster's GPUs become a custom resource (`logical_gpu`) and each logical
node a resource `node_<i>` holding its GPUs, so placement (colocated vs disjoint nodes)
is enforced by Ray exactly as on a real cluster. Every worker gets the plan's environment.
"""
import contextlib
import logging
import os

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


def _embedded_resources(cluster_cfg) -> dict[str, float]:
    resources = {node_resource(n): float(cluster_cfg.gpus_per_node) for n in range(cluster_cfg.nodes)}
    if not _has_cuda():
        resources[LOGICAL_GPU] = float(cluster_cfg.nodes * cluster_cfg.gpus_per_node)
    return resources


@contextlib.contextmanager
def ray_session(config, plan_env: dict[str, str]):
    """ray.init for this run; ray.shutdown on exit (success, error or Ctrl-C)."""
    import ray

    runtime_env = {"env_vars": worker_env(plan_env)}
    embedded = config.cluster.ray_address is None
    if embedded:
        ray.init(resources=_embedded_resources(config.cluster), num_cpus=os.cpu_count(),
                 include_dashboard=False, runtime_env=runtime_env, logging_level=logging.WARNING,
                 namespace=f"launcher-{config.run.name}")
    else:
        ray.init(address=config.cluster.ray_address, runtime_env=runtime_env, logging_level=logging.WARNING,
                 namespace=f"launcher-{config.run.name}")
    try:
        yield embedded
    finally:
        ray.shutdown()
