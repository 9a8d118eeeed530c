"""`sbatch`: a Slurm batch script for one checked run. It brings Ray up on the allocated nodes (head on
the first, a worker on each other one, cluster.gpus_per_node GPUs each), waits until all
cluster.nodes are alive, runs `python -m launcher run` against that Ray (cluster.ray_address) and
stops Ray on every node however the run ends. Its time limit comes from the plan
(launcher/cli/slurm_time.py).

Preemption: the script asks Slurm for SIGUSR1 run.preemption_grace_s before the limit
(`--signal=B:USR1@<grace>`, launcher/plan/preemption.py) and hands it to the launcher, which saves
the last completed step and exits 138 (launcher/driver/loop/preemption.py). After a 138 the script
stops Ray and requeues the job (`--requeue`); the requeued job runs the same script, which then
resumes (run.resume=auto, whatever the first start said), until run.steps are done.
`scancel --signal=USR1 --batch JOB` does the same by hand; `scancel --signal=USR2 --batch JOB`
saves and ends the job (exit 140, no requeue). A plain `scancel`, and the limit itself, send
SIGTERM to every process of the job, Ray's included: the launcher tries to save, but its
trainers are going too (the `B:` signal ahead of the limit exists for this), so the script
only waits for the launcher then.

    python -m launcher sbatch [overrides]             writes <run dir>/sbatch.sh (and the run's plan)
    python -m launcher sbatch --submit [overrides]    ... and submits it with Slurm's `sbatch`
    python -m launcher sbatch --dry-run [overrides]   prints the script; writes and submits nothing
"""
import math
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from launcher.cli.args import UsageError
from launcher.cli.commands import write_beside_plan
from launcher.cli.slurm_time import TimeLimit, time_limit
from launcher.cli.submit import refuse_secret_overrides
from launcher.config.compose import Composed
from launcher.driver.records.rundir import run_dir_of
from launcher.exit_codes import ExitCode
from launcher.plan.preemption import grace_s
from launcher.validate import plan_and_check
from launcher.validate.report import findings_text

RAY_PORT = 6379
NODES_TIMEOUT_S = 300
SLURM_MAX_SIGNAL_S = 65535
"""The largest `--signal=...@<seconds>` Slurm accepts."""

_TEMPLATE = """\
#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus}
#SBATCH --time={time}
#SBATCH --exclusive
#SBATCH --output={run_dir}/slurm-%j.out
#SBATCH --open-mode=append
#SBATCH --signal=B:USR1@{grace}
#SBATCH --requeue
# Written by `python -m launcher sbatch` for {run_dir}: Ray on the allocation, then the run.
# --time: {time_basis}.
# --signal: USR1 to this script {grace} s before the limit: the launcher saves the last completed
# step and exits {usr1_code}, and the job is requeued to resume from it. {grace} s: {grace_basis}.
set -uo pipefail
launcher=""
stop() {{  # $1: the signal. Before the run starts: end (stop_ray on EXIT), nothing to save.
  [ -n "$launcher" ] || {{ echo "SIG$1 before the run started: nothing to save" >&2; exit $((128 + $(kill -l "$1"))); }}
  # USR1/USR2 reach this script alone (`B:`, `scancel --batch`): the launcher saves and exits. SIGTERM
  # (scancel, the limit) Slurm sends to the launcher itself: the script waits for it below.
  [ "$1" = TERM ] || kill -"$1" "$launcher" 2>/dev/null
}}
trap 'stop USR1' USR1
trap 'stop USR2' USR2
trap 'stop TERM' TERM
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

resume={resume}
[ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ] && resume=auto  # requeued: continue from the newest checkpoint
{python} -m launcher run {overrides} run.resume="$resume" cluster.ray_address="$address" &
launcher=$!
wait "$launcher"
rc=$?
while kill -0 "$launcher" 2>/dev/null; do  # a trapped signal ends `wait` early: wait for the launcher itself
  wait "$launcher"
  rc=$?
done
if [ "$rc" = {usr1_code} ]; then
  stop_ray
  trap - EXIT
  echo "requeueing job $SLURM_JOB_ID (restart ${{SLURM_RESTART_COUNT:-0}}): it resumes from the checkpoint just saved"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit $rc
"""


def sbatch_script(composed: Composed, run_dir: Path, limit: TimeLimit, grace: tuple[float, str]) -> str:
    """The batch script for this run: nodes and GPUs per node from the cluster section, the run's own
    overrides with an absolute run.output_dir, this venv's python and ray. It runs from the folder sbatch
    was called in, where the recipe's relative data paths resolve (launcher.paths). `grace`: (seconds, how
they were found) of run.preemption_grace_s."""
    cluster = composed.config.cluster
    kept = [o for o in composed.overrides if o.partition("=")[0].lstrip("+~") not in ("run.output_dir",
                                                                                      "cluster.ray_address",
                                                                                      "run.resume")]
    overrides = [*kept, f"run.output_dir={os.path.abspath(composed.config.run.output_dir)}"]
    python = Path(sys.executable)
    return _TEMPLATE.format(name=composed.config.run.name, nodes=cluster.nodes, gpus=cluster.gpus_per_node,
                            run_dir=run_dir, root=shlex.quote(os.getcwd()), port=RAY_PORT,
                            ray=shlex.quote(str(python.with_name("ray"))), python=shlex.quote(str(python)),
                            timeout=NODES_TIMEOUT_S, overrides=shlex.join(overrides), time=limit.slurm,
                            time_basis=limit.basis, grace=math.ceil(grace[0]), grace_basis=grace[1],
                            usr1_code=int(ExitCode.PREEMPTED_USR1),
                            resume=shlex.quote(composed.config.run.resume))


def cmd_sbatch(composed: Composed, dry_run: bool, submit: bool) -> int:
    refuse_secret_overrides(composed.overrides, "in the batch script")
    findings, plan = plan_and_check(composed)
    if any(f.severity == "error" for f in findings):
        sys.stderr.write(findings_text(findings, "refusing to write the batch script: "))
        return ExitCode.REFUSED
    if findings:
        sys.stderr.write(findings_text(findings, "validation: "))
    grace = grace_s(composed.config, plan)
    if grace[0] > SLURM_MAX_SIGNAL_S:
        sys.stderr.write(f"refusing to write the batch script: the preemption grace is {grace[0]:.0f} s ({grace[1]}), "
                         f"more than the {SLURM_MAX_SIGNAL_S} s Slurm's --signal takes.\n"
                         f"    fix: set run.preemption_grace_s to at most {SLURM_MAX_SIGNAL_S}.\n")
        return ExitCode.REFUSED
    # The head's wait, then the workers'; the grace before the limit
    limit = time_limit(composed.config, plan, bring_up_s=2 * NODES_TIMEOUT_S, grace_s=grace[0])
    if not _partition_fits(composed.config.cluster, limit):
        return ExitCode.REFUSED
    run_dir = Path(os.path.abspath(run_dir_of(composed)))
    if dry_run:
        sys.stdout.write(sbatch_script(composed, run_dir, limit, grace))
        return ExitCode.OK
    script = write_beside_plan(composed, plan, "sbatch.sh", sbatch_script(composed, run_dir, limit, grace))
    if script is None:
        return ExitCode.REFUSED
    if submit:
        return _submit(script)
    sys.stdout.write(f"wrote {script}: `sbatch {script}` runs it on {composed.config.cluster.nodes} node(s) "
                     f"(--time={limit.slurm}); --submit submits it\n")
    return ExitCode.OK


def _submit(script: Path) -> int:
    """Hand the script to Slurm's `sbatch`; its job id, or Slurm's refusal, on the terminal."""
    if shutil.which("sbatch") is None:
        raise UsageError(f"--submit needs Slurm's `sbatch` on PATH; {script} is written: submit it from a "
                         "login node of the cluster with `sbatch` there")
    done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=60)
    if done.returncode:
        sys.stderr.write(f"sbatch refused {script}: {done.stderr.strip()}\n")
        return ExitCode.REFUSED
    job = done.stdout.strip().split(";")[0]
    sys.stdout.write(f"submitted batch job {job}: {script}; output in {script.parent}/slurm-{job}.out, "
                     f"`squeue -j {job}` shows it, `scancel {job}` stops it (and its Ray)\n")
    return ExitCode.OK


def _partition_fits(cluster, limit: TimeLimit) -> bool:
    """sinfo's default partition against the plan's nodes, GPUs and time (launcher/cli/slurm_preflight.py)."""
    from launcher.cli.slurm_preflight import default_partition, shortfall

    partition = default_partition()
    if partition is None:
        sys.stderr.write("sbatch: sinfo is missing, failed or names no default partition: its nodes, GPUs and "
                         "time limit are not checked\n")
        return True
    lacking = shortfall(partition, cluster.nodes, cluster.gpus_per_node, limit)
    for what, fix in lacking:
        sys.stderr.write(f"refusing to write the batch script: {what}.\n"
                         "    why: Slurm would keep the job pending (or refuse it) for resources or time the "
                         "partition never gives.\n"
                         f"    fix: {fix}.\n")
    return not lacking
