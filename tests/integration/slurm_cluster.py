"""A real one-node Slurm on this machine for the tests: munge, slurmctld and slurmd (Debian's
slurm-wlm, run as root) from a generated slurm.conf in a temporary folder, with two GPU
"devices" (plain files: Slurm's gres plugin needs files to count, not real GPUs), stopped
afterwards with every process it started.

The node's name, CPUs and memory are read off this machine; `ReturnToService=2` lets the node
come up idle after a restart. The daemons listen on their own ports (not Slurm's defaults), and
every client command gets SLURM_CONF, so a Slurm installation already configured here is untouched.
"""
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
PORTS = (16817, 16818)
IDLE_TIMEOUT_S = 30


@dataclass
class Slurm:
    folder: Path

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.folder / "slurm.conf")}

    def run(self, *cmd: str, check: bool = True) -> str:
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60)
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(cmd)}: {done.stderr}")
        return done.stdout

    def job_state(self, job_id: str) -> str:
        """COMPLETED, FAILED, CANCELLED, RUNNING ... (`scontrol show job`: no accounting daemon here)."""
        out = self.run("scontrol", "show", "job", job_id)
        return out.split("JobState=", 1)[1].split()[0]

    def wait_for_end(self, job_id: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                return state
            time.sleep(1)
        raise AssertionError(f"job {job_id} still {self.job_state(job_id)} after {timeout_s} s")


def missing() -> str | None:
    """Why a Slurm cannot be started here (None: it can)."""
    if os.geteuid() != 0:
        return "the test Slurm runs its daemons as root (SlurmUser=root)"
    absent = [b for b in ("munged", "slurmctld", "slurmd", "sbatch") if shutil.which(b) is None]
    if absent:
        return f"{', '.join(absent)} not installed: apt-get install -y slurm-wlm munge (.ci/run does)"
    return None


def _conf(folder: Path) -> str:
    host = socket.gethostname().split(".")[0]
    memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 - 2048
    return "\n".join([
        "ClusterName=launchertest", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "GresTypes=gpu", "MpiDefault=none",
        "ReturnToService=2", f"SlurmctldPort={PORTS[0]}", f"SlurmdPort={PORTS[1]}",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd.log",
        f"NodeName={host} CPUs={os.cpu_count()} RealMemory={memory_mib} Gres=gpu:2 State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""])


def start(folder: Path) -> tuple[Slurm, list[subprocess.Popen]]:
    """munged (unless one runs), slurmctld and slurmd in the foreground (-D) as children of this
    process, then wait until the node is idle."""
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True)
    for gpu in ("gpu0", "gpu1"):
        (folder / gpu).touch()
    (folder / "gres.conf").write_text(f"Name=gpu File={folder}/gpu0\nName=gpu File={folder}/gpu1\n")
    (folder / "slurm.conf").write_text(_conf(folder))
    slurm, procs = Slurm(folder), []
    if not MUNGE_SOCKET.exists():
        MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
        procs.append(subprocess.Popen(["munged", "--force", "--foreground"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        _wait(MUNGE_SOCKET.exists, "munged's socket")
    conf = str(folder / "slurm.conf")
    for daemon in ("slurmctld", "slurmd"):
        procs.append(subprocess.Popen([daemon, "-D", "-f", conf], env=slurm.env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    _wait(lambda: "idle" in slurm.run("sinfo", "-h", "-o", "%T", check=False), "the node to be idle")
    return slurm, procs


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait(ready, what: str) -> None:
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"test Slurm: no {what} after {IDLE_TIMEOUT_S} s")
        time.sleep(0.5)
