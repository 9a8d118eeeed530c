"""`sbatch`'s preflight: the Slurm partition the job would go to has the nodes and GPUs per node
the plan needs, asked of `sinfo` before a script is written. A job that asks for more waits in the
queue forever (PENDING, Reason=Resources or BadConstraints) or is refused at submit time, far
from the config that caused it.

Checked: the default partition (`sinfo` marks it with `*`), its node count over every state,
and the GPUs each node offers (the `gpu` GRES, `gpu:2` or `gpu:h100:8(S:0-1)`).
Where `sinfo` is missing or cannot reach a controller (the script is written on a laptop),
nothing is checked, and the command says so."""
import re
import shutil
import subprocess
from dataclasses import dataclass

GPU_GRES = re.compile(r"gpu(?::[^:,()]+)?:(\d+)")


@dataclass
class Partition:
    name: str
    nodes: int
    gpus_per_node: int
    """The fewest GPUs a node of the partition offers (0 without a gpu GRES)."""


def default_partition() -> Partition | None:
    """The default partition as sinfo reports it; None where sinfo is missing, fails or names no default."""
    if shutil.which("sinfo") is None:
        return None
    out = subprocess.run(["sinfo", "-h", "-o", "%P|%D|%G"], capture_output=True, text=True, timeout=30)
    if out.returncode:  # no slurm.conf or controller here: a script written away from the cluster
        return None
    rows = [line.split("|") for line in out.stdout.splitlines() if line.count("|") == 2]
    default = [(p.rstrip("*"), int(n), gres) for p, n, gres in rows if p.endswith("*")]
    if not default:
        return None
    gpus = [int(m.group(1)) if (m := GPU_GRES.search(gres)) else 0 for _, _, gres in default]
    return Partition(default[0][0], sum(n for _, n, _ in default), min(gpus))


def shortfall(partition: Partition, nodes: int, gpus_per_node: int) -> str | None:
    """What the partition lacks for cluster.nodes x cluster.gpus_per_node, or None."""
    lacking = []
    if partition.nodes < nodes:
        lacking.append(f"cluster.nodes={nodes} but partition {partition.name} has {partition.nodes} node(s)")
    if partition.gpus_per_node < gpus_per_node:
        lacking.append(f"cluster.gpus_per_node={gpus_per_node} but the nodes of partition {partition.name} offer "
                       f"{partition.gpus_per_node} GPU(s) each (sinfo's gpu GRES)")
    return "; ".join(lacking) or None
