"""`cluster:` section: the hardware a run is planned for (values live in clusters/*.yaml)."""
from dataclasses import dataclass, field
from typing import Optional

from launcher.config.schema.choices import GpuArch


@dataclass
class GpuConfig:
    name: str = "cpu"
    """Marketing name (B300, H200, ...); informational, rules key on `arch` and numbers."""
    memory_gib: float = 8.0
    """Usable device memory per GPU in GiB (2^30 B). Bounds every per-GPU memory rule."""
    bf16_tflops: float = 1.0
    """Peak dense bf16 TFLOP/s per GPU; the cost model applies an efficiency to it."""
    hbm_tbps: float = 0.05
    """Device memory bandwidth in TB/s; sets the decode-step time in the generation estimate."""
    arch: GpuArch = GpuArch.cpu
    """Generation: blackwell adds FLA_TILELANG=0, hopper/blackwell with TP/CP > 1 add
    CUDA_DEVICE_MAX_CONNECTIONS=1 to every worker's environment."""


@dataclass
class LinksConfig:
    intra_node_gbps: float = 100.0
    """Per-GPU bandwidth to a GPU of the same node, Gbit/s per direction (NVLink). Used for
    colocated weight sync and TP/EP traffic inside a node."""
    inter_node_gbps: float = 25.0
    """Per-GPU network bandwidth between nodes, Gbit/s per direction (one NIC per GPU). Used
    for async weight sync and cross-node EP/DP traffic."""
    storage_gib_per_s: float = 0.5
    """What one node reads from (and writes to) checkpoint storage, GiB/s: model.hf_path's shards
    at start-up and the run's checkpoints. The default is a shared filesystem's pessimistic
    share; a node's local NVMe is several times that (3.6-3.7 GiB/s measured on the H200
    machine: 44.3 GiB of safetensors read onto the GPU in 12 s). Prices the start-up
    estimate, and from it the first-call deadline."""


@dataclass
class KubernetesConfig:
    """What `rayjob` puts into the KubeRay RayJob manifest besides the plan's nodes and GPUs."""

    image: Optional[str] = None
    """Container image of every Ray pod (head, workers and KubeRay's submitter), with this project and
    its [rl] extra installed: the job runs `python -m launcher run` in it, and a RayJob ships no local
    code. null: `rayjob` refuses to write a manifest."""
    node_selector: dict[str, str] = field(default_factory=dict)
    """Node labels every Ray pod must match, so the pods land on nodes of this cluster file's GPU
    (e.g. {nvidia.com/gpu.product: NVIDIA-H200}, the label NVIDIA's GPU feature discovery sets);
    {} = any node with cluster.gpus_per_node free GPUs."""
    output_claim: Optional[str] = None
    """A PersistentVolumeClaim (ReadWriteMany) mounted at run.output_dir (then absolute) in every Ray pod,
    so checkpoints and metrics outlive the job's Ray cluster; null = none: they are written to the pods'
    own disks and deleted with the cluster (`rayjob` warns)."""
    ttl_seconds_after_finished: int = 3600
    """KubeRay's ttlSecondsAfterFinished: seconds the finished job's Ray cluster is kept (its logs
    readable) before KubeRay deletes it; 0 = deleted at once."""


@dataclass
class ClusterConfig:
    name: str = "local"
    """Cluster descriptor name (the clusters/*.yaml it came from)."""
    nodes: int = 1
    """Number of nodes, >= 1. placement.trainer_nodes + inference_nodes must fit in it."""
    gpus_per_node: int = 2
    """GPUs per node, >= 1. On a machine without GPUs these are logical GPUs for Ray."""
    gpu: GpuConfig = field(default_factory=GpuConfig)
    """The GPU every node carries (clusters are homogeneous)."""
    host_memory_gib: float = 24.0
    """Host RAM per node in GiB; must hold sleeping engines' weights (sleep_level 1) and
    CPU-offloaded optimizer state."""
    links: LinksConfig = field(default_factory=LinksConfig)
    """Interconnect bandwidths for the cost model and weight-sync estimates."""
    ray_address: Optional[str] = None
    """Address of a running Ray cluster (`host:6379`, `ray://host:10001` or `auto`); null starts an
    embedded local Ray with the cluster's nodes and GPUs as logical resources. Required by `submit`."""
    dashboard_address: Optional[str] = None
    """The Ray dashboard's HTTP address that `submit` sends Ray jobs to (`http://host:8265`; `jobs` asks
    the one each job went to); null = the host of ray_address on Ray's default dashboard port 8265
    (127.0.0.1 for `auto`).
    With token auth (RAY_AUTH_MODE=token) Ray's client sends the token from RAY_AUTH_TOKEN,
    RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token."""
    ship_code: bool = True
    """On a Ray cluster (ray_address set, and for `submit`'s jobs), upload the launcher to every node:
    from a checkout, this repository (code, recipes, data/) as Ray's runtime_env working_dir, without
    runs/, .venv*, .git, .whl, .pkgs, weight files (*.safetensors, *.pt, *.bin) and what .gitignore
    lists; from a wheel install, the installed `launcher` (with its shipped recipes and data) and
    `model` packages as runtime_env py_modules. Ray caches it per content and refuses a package over
    its gRPC message size (512 MiB). false: every node has the project installed at the same version
    and the same paths."""
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    """The KubeRay RayJob manifest `rayjob` writes for this cluster (image, node labels, volume)."""
