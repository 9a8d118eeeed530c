"""Storage rules: on a Ray cluster every node writes into the run and checkpoint directories."""
from pathlib import PurePosixPath

from launcher.validate.registry import rule, warning

# Per-machine mounts: a path under them names a different folder on every node.
NODE_LOCAL_ROOTS = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/scratch/local", "/local")


def _node_local_root(path: str) -> str | None:
    parts = PurePosixPath(path).parts
    for root in NODE_LOCAL_ROOTS:
        if parts[:len(PurePosixPath(root).parts)] == PurePosixPath(root).parts:
            return root
    return None


@rule("RUN003")
def shared_run_storage(cfg, plan):
    """On a Ray cluster, run and checkpoint directories are absolute and not node-local."""
    if cfg.cluster.ray_address is None:
        return
    for key, path in (("run.output_dir", cfg.run.output_dir), ("checkpoint.dir", cfg.checkpoint.dir)):
        if path is None:
            continue
        if not PurePosixPath(path).is_absolute():
            yield warning(key, f"{key}={path!r} is relative on the Ray cluster at {cfg.cluster.ray_address}",
                          "Trainer ranks write checkpoints from their own working directory (the shipped code's "
                          "copy on each node), so a relative path lands in a different folder per process.",
                          f"Set {key} to an absolute path on storage every node mounts (NFS, Lustre, ...).")
        elif root := _node_local_root(path):
            yield warning(key, f"{key}={path!r} is under {root}, which is local to each node",
                          f"The driver and the trainer ranks on other nodes each see their own {root}: checkpoints "
                          "and metrics end up split across machines and resume finds none.",
                          f"Set {key} to an absolute path on storage every node mounts (NFS, Lustre, ...).")
