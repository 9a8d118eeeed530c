"""`rayjob`: a KubeRay `RayJob` manifest for one checked run, the Kubernetes counterpart of `sbatch`.
KubeRay creates a Ray cluster of the plan's shape (the head and cluster.nodes - 1 workers, each a
pod with cluster.gpus_per_node GPUs, on nodes matching cluster.kubernetes.node_selector), runs
`python -m launcher run <the same overrides>` on it as a Ray job, and deletes the cluster after
the job (shutdownAfterJobFinishes, after cluster.kubernetes.ttl_seconds_after_finished).
Each pod's terminationGracePeriodSeconds is run.preemption_grace_s (launcher/plan/preemption.py):
a drained or preempted node's pods get SIGTERM and that long before SIGKILL, the time the driver
needs to finish or drop its step, save and stop Ray (launcher/driver/loop/preemption.py). Ray's own
processes in the pods get the SIGTERM too; whether they outlive the save there is untested.

    python -m launcher rayjob [overrides]             writes <run dir>/rayjob.yaml: `kubectl apply -f` it
    python -m launcher rayjob --dry-run [overrides]   prints it; writes nothing

Checked against KubeRay v1.7.0's own RayJob CRD schema in the tests (tests/unit/cli/test_rayjob.py, the CRD in
tests/fixtures/kuberay/); never applied to a Kubernetes cluster here.
"""
import math
import os
import re
import shlex
import sys
from importlib import metadata

import yaml

from launcher.cli.commands import write_beside_plan
from launcher.cli.submit import refuse_secret_overrides
from launcher.config.compose import Composed
from launcher.config.schema.choices import GpuArch
from launcher.errors import Finding
from launcher.exit_codes import ExitCode
from launcher.plan.preemption import grace_s
from launcher.validate import plan_and_check
from launcher.validate.report import findings_text

NAME_MAX = 47
"""KubeRay's MaxRayJobNameLength: its RayCluster name limit (53) less the suffix it appends."""
GPU_RESOURCE = "nvidia.com/gpu"
"""NVIDIA's device plugin's resource name."""
_PINNED_KEYS = ("cluster.ray_address", "cluster.dashboard_address")
"""Keys the entrypoint sets itself: the job runs on the Ray cluster KubeRay made for it."""


def rayjob_name(run_name: str) -> str:
    """run.name as the DNS-1035 label KubeRay requires (lower case, `-` for anything else, a letter
    first, at most NAME_MAX characters): `tiny_grpo` -> `tiny-grpo`."""
    name = re.sub(r"[^a-z0-9-]+", "-", run_name.lower()).strip("-")
    name = name if name[:1].isalpha() else f"run-{name}"
    return name[:NAME_MAX].rstrip("-")


def entrypoint(composed: Composed) -> str:
    """`python -m launcher run` with the point's overrides, on the job's own cluster (`auto`: the
    RAY_ADDRESS the Ray job runs with). run.output_dir stays as given: it is a path in the pods."""
    kept = [o for o in composed.overrides if o.partition("=")[0].lstrip("+~") not in _PINNED_KEYS]
    return shlex.join(["python", "-m", "launcher", "run", *kept, "cluster.ray_address=auto"])


def _pod_template(composed: Composed, role: str, grace_s: int) -> dict:
    """One Ray pod: the image, the node's GPUs as NVIDIA's device-plugin resource (a CPU cluster file's
    logical GPUs go to Ray as num-gpus instead, see _ray_start_params), a memory-backed /dev/shm for
    Ray's object store (a container's default is 64 MiB), and the output claim at run.output_dir."""
    cluster = composed.config.cluster
    k8s = cluster.kubernetes
    container = {"name": f"ray-{role}", "image": k8s.image,
                 "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    if cluster.gpu.arch is not GpuArch.cpu:
        container["resources"] = {"limits": {GPU_RESOURCE: cluster.gpus_per_node}}
    if k8s.output_claim:
        container["volumeMounts"].append({"name": "runs", "mountPath": composed.config.run.output_dir})
        volumes.append({"name": "runs", "persistentVolumeClaim": {"claimName": k8s.output_claim}})
    spec = {"containers": [container], "volumes": volumes, "terminationGracePeriodSeconds": grace_s}
    if k8s.node_selector:
        spec["nodeSelector"] = dict(k8s.node_selector)
    return {"spec": spec}


def _ray_start_params(composed: Composed) -> dict[str, str]:
    """Empty on GPU nodes (KubeRay reads num-gpus off the container's nvidia.com/gpu limit); a CPU
    cluster file's logical GPUs, as the embedded Ray declares them."""
    cluster = composed.config.cluster
    return {"num-gpus": str(cluster.gpus_per_node)} if cluster.gpu.arch is GpuArch.cpu else {}


def _ray_cluster_spec(composed: Composed, grace_s: int) -> dict:
    """Head and workers of the plan's shape; Ray's token authentication on, with a token KubeRay
    makes and hands to every pod and to the job's submitter."""
    spec = {"authOptions": {"mode": "token"},
            "headGroupSpec": {"rayStartParams": _ray_start_params(composed),
                              "template": _pod_template(composed, "head", grace_s)}}
    try:
        spec["rayVersion"] = metadata.version("ray")  # the project's Ray, which the image must carry
    except metadata.PackageNotFoundError:
        pass
    workers = composed.config.cluster.nodes - 1
    if workers:
        spec["workerGroupSpecs"] = [{"groupName": "workers", "replicas": workers, "minReplicas": workers,
                                     "maxReplicas": workers, "rayStartParams": _ray_start_params(composed),
                                     "template": _pod_template(composed, "worker", grace_s)}]
    return spec


def rayjob_manifest(composed: Composed, grace_s: float) -> dict:
    """The RayJob; `grace_s`: run.preemption_grace_s, each pod's terminationGracePeriodSeconds."""
    k8s = composed.config.cluster.kubernetes
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": rayjob_name(composed.config.run.name)},
            "spec": {"entrypoint": entrypoint(composed),
                     "runtimeEnvYAML": yaml.safe_dump({"env_vars": {"PYTHONUNBUFFERED": "1"}}),
                     "shutdownAfterJobFinishes": True,
                     "ttlSecondsAfterFinished": k8s.ttl_seconds_after_finished,
                     "rayClusterSpec": _ray_cluster_spec(composed, math.ceil(grace_s))}}


def manifest_findings(config) -> list[Finding]:
    """What stops the manifest from working (errors) or loses the run's output (a warning)."""
    k8s, output_dir = config.cluster.kubernetes, config.run.output_dir
    found = []
    if not k8s.image:
        found.append(Finding(
            "K8S001", "error", "cluster.kubernetes.image", "cluster.kubernetes.image is null: the Ray pods need a "
            "container image.", "A RayJob ships no local code: every pod runs `python -m launcher` from its image.",
            "Build an image with this project and its [rl] extra installed and set cluster.kubernetes.image=IMAGE."))
    if k8s.output_claim and not os.path.isabs(output_dir):
        found.append(Finding(
            "K8S002", "error", "run.output_dir", f"run.output_dir={output_dir} is relative, but "
            f"cluster.kubernetes.output_claim={k8s.output_claim} is mounted at it.",
            "A volume mounts at an absolute path; a relative run.output_dir lands in the job's working folder.",
            "Set run.output_dir to an absolute path in the pods, e.g. run.output_dir=/mnt/runs."))
    if not k8s.output_claim:
        found.append(Finding(
            "K8S003", "warning", "cluster.kubernetes.output_claim", "cluster.kubernetes.output_claim is null: "
            f"checkpoints and metrics go to {output_dir} on the pods' own disks.",
            "KubeRay deletes the job's Ray cluster, pods and disks included, after the job finishes.",
            "Set cluster.kubernetes.output_claim=CLAIM (a ReadWriteMany PersistentVolumeClaim) and an absolute "
            "run.output_dir."))
    return found


def cmd_rayjob(composed: Composed, dry_run: bool) -> int:
    refuse_secret_overrides(composed.overrides, "in the RayJob manifest (the entrypoint)")
    findings, plan = plan_and_check(composed)
    findings = [*findings, *manifest_findings(composed.config)]
    if any(f.severity == "error" for f in findings):
        sys.stderr.write(findings_text(findings, "refusing to write the RayJob manifest: "))
        return ExitCode.REFUSED
    if findings:
        sys.stderr.write(findings_text(findings, "validation: "))
    text = yaml.safe_dump(rayjob_manifest(composed, grace_s(composed.config, plan)[0]), sort_keys=False)
    if dry_run:
        sys.stdout.write(text)
        return ExitCode.OK
    manifest = write_beside_plan(composed, plan, "rayjob.yaml", text)
    if manifest is None:
        return ExitCode.REFUSED
    sys.stdout.write(f"wrote {manifest}: `kubectl apply -f {manifest}` runs it on {composed.config.cluster.nodes} "
                     "pod(s) (the project's tests check this shape against KubeRay v1.7.0's RayJob CRD; none was "
                     "applied to a cluster)\n")
    return ExitCode.OK
