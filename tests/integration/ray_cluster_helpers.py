"""A real Ray cluster of one or more nodes on this machine, started with `ray start` in a
private temp dir on free ports and stopped by killing exactly the processes it started
(never `ray stop`, which would end every Ray on the machine, other tests' included)."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
_PORT_FLAGS = ("--node-manager-port", "--object-manager-port", "--metrics-export-port",
               "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


WORKER_PORTS = 51


def _free_range(count: int = WORKER_PORTS) -> int:
    """First port of `count` free consecutive ports below the kernel's ephemeral range
    (where bind(0) draws the component ports), so the two can never collide."""
    import random

    for _ in range(200):
        base = random.randrange(20000, 32000 - count)
        try:
            socks = [socket.socket() for _ in range(count)]
            for i, sock in enumerate(socks):
                sock.bind(("127.0.0.1", base + i))
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
        return base
    raise RuntimeError("no free range of worker ports in 20000-32000")


class RayCluster:
    """`ray start --head` plus `ray start --address` workers, each with declared CPUs/GPUs."""

    def __init__(self):
        # Short: Ray's unix sockets live under it and their paths are limited to ~107 bytes.
        self.tmp = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))
        self.env = {**os.environ, "RAY_TMPDIR": str(self.tmp), "RAY_AUTH_MODE": "token"}
        self.address: str | None = None

    def _start(self, args: list[str], num_cpus: int, num_gpus: int, resources: str | None) -> None:
        ports = _free_ports(len(_PORT_FLAGS))
        workers = _free_range()
        cmd = [RAY, "start", f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}", "--disable-usage-stats",
               f"--min-worker-port={workers}", f"--max-worker-port={workers + WORKER_PORTS - 1}", *args]
        cmd += [f"{flag}={port}" for flag, port in zip(_PORT_FLAGS, ports, strict=False)]
        if resources:
            cmd.append(f"--resources={resources}")
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    def start_head(self, num_cpus: int = 2, num_gpus: int = 0, resources: str | None = None,
                   dashboard: bool = False) -> str:
        """The head node; `dashboard=True` adds the dashboard (the job API) at `self.dashboard_url`."""
        port, dash_port = _free_ports(2)
        web = ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash_port}"] \
            if dashboard else ["--include-dashboard=false"]
        self._start(["--head", f"--port={port}", f"--temp-dir={self.tmp / 'ray'}", *web,
                     f"--ray-client-server-port={_free_ports(1)[0]}"], num_cpus, num_gpus, resources)
        self.dashboard_url = f"http://127.0.0.1:{dash_port}" if dashboard else None
        self.address = f"127.0.0.1:{port}"
        return self.address

    def add_worker(self, num_cpus: int = 2, num_gpus: int = 0, resources: str | None = None) -> None:
        self._start([f"--address={self.address}"], num_cpus, num_gpus, resources)

    def wait_for_nodes(self, count: int, timeout_s: float = 60) -> None:
        code = (f"import ray; ray.init(address={self.address!r}, logging_level='ERROR'); "
                "print(sum(n['Alive'] for n in ray.nodes()))")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True, text=True,
                                 timeout=60).stdout.strip().splitlines()
            if out and out[-1].isdigit() and int(out[-1]) >= count:
                return
            time.sleep(1)
        raise AssertionError(f"the Ray cluster at {self.address} did not reach {count} nodes")

    def processes(self) -> list[psutil.Process]:
        """Every live process of this cluster: those naming its temp dir, and their children."""
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(str(self.tmp) in part for part in proc.info["cmdline"] or []):
                    found[proc.pid] = proc
                    for child in proc.children(recursive=True):
                        found[child.pid] = child
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        found.pop(os.getpid(), None)
        return [p for p in found.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    def stop(self) -> list[str]:
        """Kill this cluster's processes; returns those still alive afterwards (should be none)."""
        procs = self.processes()
        for proc in procs:  # a test cluster holds nothing worth a graceful stop
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=10)
        left = [f"{p.name()} pid {p.pid}" for p in self.processes()]
        shutil.rmtree(self.tmp, ignore_errors=True)
        return left
