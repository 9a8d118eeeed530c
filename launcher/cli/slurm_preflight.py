"""`sbatch`'s preflight: the Slurm partition the job would go to has the nodes and GPUs per node
the plan needs, asked of `sinfo` before a script is written. A job that asks for more waits in the
queue forever (PENDING, Reason=Resources or BadConstraints) or is refused at submit time, far
from the config that caused it.

Checked: the default partition (`sinfo` marks it with `*`), its node count over every state,
the GPUs each node offers (the `gpu` GRES, `gpu:2` or `gpu:h100:8(S:0-1)`) and its time limit
against the script's `--time` (launcher/cli/slurm_time.py).
Where `sinfo` is missing or cannot reach a controller (the script is written on a laptop),
nothing is checked, and the command says so."""
import re
import shutil
import subprocess
from dataclasses import dataclass

from launcher.cli.slurm_time import TimeLimit, clock

GPU_GRES = re.compile(r"gpu(?::[^:,()]+)?:(\d+)")


@dataclass
class Partition:
    name: str
    nodes: int
    gpus_per_node: int
    """The fewest GPUs a node of the partition offers (0 without a gpu GRES)."""
    max_time_s: int | None = None
    """The partition's time limit (sinfo's %l); None: infinite."""


def default_partition() -> Partition | None:
    """The default partition as sinfo reports it; None where sinfo is missing, fails or names no default."""
    if shutil.which("sinfo") is None:
        return None
    out = subprocess.run(["sinfo", "-h", "-o", "%P|%D|%G|%l"], capture_output=True, text=True, timeout=30)
    if out.returncode:  # no slurm.conf or controller here: a script written away from the cluster
        return None
    rows = [line.split("|") for line in out.stdout.splitlines() if line.count("|") == 3]
    default = [(p.rstrip("*"), int(n), gres, limit) for p, n, gres, limit in rows if p.endswith("*")]
    if not default:
        return None
    gpus = [int(m.group(1)) if (m := GPU_GRES.search(gres)) else 0 for _, _, gres, _ in default]
    return Partition(default[0][0], sum(row[1] for row in default), min(gpus), slurm_seconds(default[0][3]))


def slurm_seconds(text: str) -> int | None:
    """Seconds of a Slurm time string (`30`, `30:00`, `2:00:00`, `1-12`, `1-12:30:00`: minutes unless a
    day or three fields say otherwise); None for `infinite`, `UNLIMITED` or `n/a`."""
    if not text[:1].isdigit():
        return None
    days, _, hms = text.rpartition("-")
    fields = [int(f) for f in hms.split(":")]
    if len(fields) > 3:
        raise ValueError(f"{text!r} is no Slurm time: at most days-hours:minutes:seconds")
    if days:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = (fields + [0, 0])[:3]
    elif len(fields) == 3:  # hours:minutes:seconds
        hours, minutes, seconds = fields
    else:  # minutes[:seconds]
        hours, minutes, seconds = 0, fields[0], fields[1] if len(fields) == 2 else 0
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def shortfall(partition: Partition, nodes: int, gpus_per_node: int, limit: TimeLimit) -> list[tuple[str, str]]:
    """(what, fix) for each thing the partition lacks for cluster.nodes x cluster.gpus_per_node during the
    job's time limit; empty when it holds the job."""
    name, lacking = partition.name, []
    if partition.nodes < nodes:
        lacking.append((f"cluster.nodes={nodes} but partition {name} has {partition.nodes} node(s)",
                        f"set cluster.nodes <= {partition.nodes}, or use a cluster file that describes {name}"))
    if partition.gpus_per_node < gpus_per_node:
        lacking.append((f"cluster.gpus_per_node={gpus_per_node} but the nodes of partition {name} offer "
                        f"{partition.gpus_per_node} GPU(s) each (sinfo's gpu GRES)",
                        f"set cluster.gpus_per_node <= {partition.gpus_per_node}, or use a cluster file that "
                        f"describes {name}"))
    if partition.max_time_s is not None and partition.max_time_s < limit.seconds:
        lacking.append((f"run.steps={limit.steps} needs --time={limit.slurm} ({limit.basis}) but partition "
                        f"{name} allows {clock(partition.max_time_s)}", _time_fix(limit, partition.max_time_s)))
    return lacking


def _time_fix(limit: TimeLimit, max_s: int) -> str:
    """Fewer steps per job where some fit (run.resume=auto makes the next job continue), else a longer partition."""
    fits = limit.steps_within(max_s)
    if fits == 0:
        return (f"even start-up and one step need --time={clock(limit.seconds_for(1))}: use a Slurm whose default "
                "partition allows that (this check, like the script, uses sinfo's default partition)")
    return (f"set run.steps={fits} (the most that fit); with run.resume=auto (the default) a later job with a "
            "larger run.steps continues from this one's last checkpoint")
