"""`sbatch`: a Slurm batch script for one checked run. It brings Ray up on the allocated nodes (head on
the first, a worker on each other one, cluster.gpus_per_node GPUs each), waits until all
cluster.nodes are alive, runs `python -m launcher run` against that Ray (cluster.ray_address) and
stops Ray on every node however the run ends. Written next to the run's plan as
`<run dir>/sbatch.sh`; submit it with `sbatch <run dir>/sbatch.sh`. Not run against a Slurm here.
"""
import os
import shlex
import sys
from pathlib import Path

from launcher.cli.commands import take_run_dir_lock
from launcher.cli.submit import refuse_secret_overrides
from launcher.config.compose import Composed
from launcher.driver.rundir import run_dir_of, write_run_files
from launcher.exit_codes import ExitCode
from launcher.validate import plan_and_check
from launcher.validate.report import findings_text

RAY_PORT = 6379
NODES_TIMEOUT_S = 300

_TEMPLATE = """\
#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus}
#SBATCH --exclusive
#SBATCH --output={run_dir}/slurm-%j.out
# Written by `python -m launcher sbatch` for {run_dir}: Ray on the allocation, then the run.
set -uo pipefail
cd {root}
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head_ip=$(srun --overlap --nodes=1 --ntasks=1 -w "${{nodes[0]}}" hostname --ip-address | awk '{{print $1}}')
address="$head_ip:{port}"

# Ray starts with token authentication on: a token for this job alone, readable by its user only, in the
# run directory (which every node sees); srun passes the environment to each node's `ray start`.
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={run_dir}/.ray_auth_token.$SLURM_JOB_ID
(umask 077 && {python} -c "import secrets; print(secrets.token_hex(32))" > "$RAY_AUTH_TOKEN_PATH")
# Ray's session files (and the ray_current_cluster address file, which a later plain `ray.init()`
# on the node would join) in a folder of this job's, not the node's shared /tmp/ray.
ray_tmp=/tmp/ray_job_$SLURM_JOB_ID

stop_ray() {{  # on every node, however the run ended: the allocation is this job's alone (--exclusive)
  srun --overlap --nodes={nodes} --ntasks-per-node=1 {ray} stop --force >/dev/null 2>&1
  wait
  rm -f "$RAY_AUTH_TOKEN_PATH"
  srun --overlap --nodes={nodes} --ntasks-per-node=1 rm -rf "$ray_tmp" >/dev/null 2>&1
}}
trap stop_ray EXIT

wait_for_nodes() {{  # $1 alive Ray nodes within {timeout} s, or exit 3
  local deadline=$((SECONDS + {timeout})) alive
  while true; do
    alive=$({python} -c "import ray; ray.init(address='$address', logging_level='ERROR'); \\
print(sum(n['Alive'] for n in ray.nodes()))" 2>/dev/null | tail -n 1)
    [ "$alive" = "$1" ] && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "Ray at $address has ${{alive:-0}} of $1 nodes after {timeout} s" >&2
      exit 3
    fi
    sleep 5
  done
}}

srun --overlap --nodes=1 --ntasks=1 -w "${{nodes[0]}}" {ray} start --head --node-ip-address="$head_ip" \\
  --port={port} --num-gpus={gpus} --temp-dir="$ray_tmp" --disable-usage-stats --block &
wait_for_nodes 1
for node in "${{nodes[@]:1}}"; do
  srun --overlap --nodes=1 --ntasks=1 -w "$node" {ray} start --address="$address" --num-gpus={gpus} \\
    --temp-dir="$ray_tmp" --disable-usage-stats --block &
done
wait_for_nodes {nodes}

{python} -m launcher run {overrides} cluster.ray_address="$address"
rc=$?
exit $rc
"""


def sbatch_script(composed: Composed, run_dir: Path) -> str:
    """The batch script for this run: nodes and GPUs per node from the cluster section, the run's own
    overrides with an absolute run.output_dir, this venv's python and ray. It runs from the folder sbatch
    was called in, where the recipe's relative data paths resolve (launcher.paths)."""
    cluster = composed.config.cluster
    kept = [o for o in composed.overrides if o.partition("=")[0].lstrip("+~") not in ("run.output_dir",
                                                                                      "cluster.ray_address")]
    overrides = [*kept, f"run.output_dir={os.path.abspath(composed.config.run.output_dir)}"]
    python = Path(sys.executable)
    return _TEMPLATE.format(name=composed.config.run.name, nodes=cluster.nodes, gpus=cluster.gpus_per_node,
                            run_dir=run_dir, root=shlex.quote(os.getcwd()), port=RAY_PORT,
                            ray=shlex.quote(str(python.with_name("ray"))), python=shlex.quote(str(python)),
                            timeout=NODES_TIMEOUT_S, overrides=shlex.join(overrides))


def cmd_sbatch(composed: Composed) -> int:
    refuse_secret_overrides(composed.overrides, "in the batch script")
    findings, plan = plan_and_check(composed)
    if any(f.severity == "error" for f in findings):
        sys.stderr.write(findings_text(findings, "refusing to write the batch script: "))
        return ExitCode.REFUSED
    if findings:
        sys.stderr.write(findings_text(findings, "validation: "))
    if not _partition_fits(composed.config.cluster):
        return ExitCode.REFUSED
    run_dir = Path(os.path.abspath(run_dir_of(composed)))
    lock = take_run_dir_lock(run_dir)
    if lock is None:
        return ExitCode.REFUSED
    with lock:
        write_run_files(composed, plan.to_dict())
        script = run_dir / "sbatch.sh"
        script.write_text(sbatch_script(composed, run_dir))
    sys.stdout.write(f"wrote {script}: `sbatch {script}` runs it on {composed.config.cluster.nodes} node(s)\n")
    return ExitCode.OK


def _partition_fits(cluster) -> bool:
    """sinfo's default partition against the plan's nodes and GPUs (launcher/cli/slurm_preflight.py)."""
    from launcher.cli.slurm_preflight import default_partition, shortfall

    partition = default_partition()
    if partition is None:
        sys.stderr.write("sbatch: sinfo is missing, failed or names no default partition: its nodes and GPUs "
                         "are not checked\n")
        return True
    lacking = shortfall(partition, cluster.nodes, cluster.gpus_per_node)
    if lacking:
        sys.stderr.write(f"refusing to write the batch script: {lacking}.\n"
                         "    why: Slurm would keep the job pending (or refuse it) for resources the partition never has.\n"
                         f"    fix: set cluster.nodes <= {partition.nodes} and cluster.gpus_per_node <= "
                         f"{partition.gpus_per_node}, or use a cluster file that describes this partition.\n")
    return lacking is None

