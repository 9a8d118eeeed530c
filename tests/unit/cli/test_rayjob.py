"""`rayjob` writes a KubeRay RayJob manifest from the plan. It is checked against KubeRay's own RayJob
CRD schema (the `openAPIV3Schema` of ray-operator/config/crd/bases/ray.io_rayjobs.yaml at the v1.7.0
tag, unmodified), with unknown fields refused as `kubectl apply`'s default strict field validation
refuses them, and against the rules KubeRay's controller adds on top (validation.go at v1.7.0,
transcribed below). Never applied to a Kubernetes cluster.

The CRD is kept unmodified as a test fixture under tests/fixtures/kuberay/<tag>/ (its README names the
source, blob and license); its sha256 is checked, and a missing or edited copy fails the tests.
"""
import hashlib
import re
import shlex
from pathlib import Path

import pytest
import yaml

from launcher.__main__ import main
from launcher.cli.args import parse_args
from launcher.cli.rayjob import NAME_MAX, rayjob_manifest, rayjob_name
from tests.shared_compose import compose_shipped

ROOT = Path(__file__).resolve().parents[3]
KUBERAY_VERSION = "v1.7.0"
CRD = ROOT / "tests" / "fixtures" / "kuberay" / KUBERAY_VERSION / "ray.io_rayjobs.yaml"
CRD_SHA256 = "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5"
"""sha256 of the file at the v1.7.0 tag (git blob c7d3f081af8cf08c256a8c33a0c3b6ea28b816a0)."""
GPU_CLUSTER = ["recipe=dapo_sync", "cluster.kubernetes.image=registry.local/launcher:0.1",
               "cluster.kubernetes.output_claim=launcher-runs", "run.output_dir=/mnt/runs",
               "+cluster.kubernetes.node_selector={nvidia.com/gpu.product:NVIDIA-B300}"]


def _strict(node):
    """The schema with `additionalProperties: false` on every object schema that lists its properties
    and keeps no unknown fields: the API server's strict field validation, which JSON Schema lacks."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: ({p: _strict(s) for p, s in v.items()} if k == "properties" else _strict(v)) for k, v in node.items()}
    if "properties" in node and "additionalProperties" not in node \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def validator():
    """KubeRay's schema as a Draft 7 validator: jsonschema comes with ray[default] (the [rl] extra), so a
    missing one, like a missing fixture, fails rather than skips."""
    try:
        import jsonschema
    except ImportError:
        pytest.fail("jsonschema is not installed: it comes with ray[default]; pip install -e '.[rl,dev]'")
    assert CRD.is_file(), f"KubeRay {KUBERAY_VERSION}'s RayJob CRD fixture is missing: {CRD}"
    raw = CRD.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == CRD_SHA256, f"{CRD} is not KubeRay {KUBERAY_VERSION}'s RayJob CRD"
    crd = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    served = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return jsonschema.Draft7Validator(_strict(served["schema"]["openAPIV3Schema"]))


def _kuberay_rule_errors(job: dict) -> list[str]:
    """KubeRay v1.7.0's controller checks beyond the schema that this manifest's fields meet
    (utils/validation.go: ValidateRayJobMetadata, ValidateRayJobSpec, ValidateRayClusterSpec)."""
    spec, errors = job["spec"], []
    name = job["metadata"]["name"]
    if len(name) > NAME_MAX or not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        errors.append(f"name {name!r}: at most {NAME_MAX} characters, a DNS-1035 label")
    if spec.get("ttlSecondsAfterFinished", 0) > 0 and not spec.get("shutdownAfterJobFinishes"):
        errors.append("ttlSecondsAfterFinished without shutdownAfterJobFinishes")
    yaml.safe_load(spec.get("runtimeEnvYAML", ""))
    cluster = spec["rayClusterSpec"]
    for group in [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]:
        if not group["template"]["spec"]["containers"]:
            errors.append("a group without a container")
        if group.get("resources") and set(group.get("rayStartParams", {})) & {"num-cpus", "num-gpus", "memory"}:
            errors.append("resources in both rayStartParams and the group's resources")
    for group in cluster.get("workerGroupSpecs", []):
        if not group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]:
            errors.append(f"worker group {group['groupName']}: replicas outside [min, max]")
    return errors


def _written(overrides: list[str], capsys) -> tuple[dict, str]:
    """The manifest as kubectl would read it (`rayjob --dry-run`'s YAML), and what went to stderr."""
    assert main(["rayjob", "--dry-run", *overrides]) == 0, capsys.readouterr().err
    printed = capsys.readouterr()
    return yaml.safe_load(printed.out), printed.err


def _pods(job: dict) -> list[dict]:
    cluster = job["spec"]["rayClusterSpec"]
    return [g["template"]["spec"] for g in [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]]


def test_a_multi_node_gpu_manifest_meets_the_kuberay_schema_and_its_rules(validator, capsys):
    job, _ = _written(GPU_CLUSTER, capsys)
    assert [e.message for e in validator.iter_errors(job)] == [] and _kuberay_rule_errors(job) == []
    spec = job["spec"]
    assert job["metadata"]["name"] == "dapo-sync"
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] == 3600
    assert spec["rayClusterSpec"]["authOptions"] == {"mode": "token"}
    workers = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert [(w["replicas"], w["minReplicas"], w["maxReplicas"]) for w in workers] == [(1, 1, 1)]  # b300x2: 2 nodes
    for pod in _pods(job):
        container = pod["containers"][0]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
        assert container["image"] == "registry.local/launcher:0.1"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-B300"}
        assert {"name": "runs", "mountPath": "/mnt/runs"} in container["volumeMounts"]
        assert {"name": "runs", "persistentVolumeClaim": {"claimName": "launcher-runs"}} in pod["volumes"]
    assert yaml.safe_load(spec["runtimeEnvYAML"]) == {"env_vars": {"PYTHONUNBUFFERED": "1"}}


def test_the_entrypoint_runs_the_same_config_on_the_jobs_cluster(capsys):
    job, _ = _written(GPU_CLUSTER, capsys)
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:4] == ["python", "-m", "launcher", "run"] and argv[-1] == "cluster.ray_address=auto"
    there = compose_shipped(parse_args(argv[3:]).overrides).config
    here = compose_shipped(GPU_CLUSTER).config
    there.cluster.ray_address = here.cluster.ray_address
    assert there == here


def test_a_cpu_cluster_file_gets_logical_gpus_and_no_worker_group(validator, capsys):
    job, err = _written(["recipe=tiny_grpo", "cluster.kubernetes.image=registry.local/launcher:0.1"], capsys)
    assert [e.message for e in validator.iter_errors(job)] == [] and _kuberay_rule_errors(job) == []
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head["rayStartParams"] == {"num-gpus": "2"} and "resources" not in head["template"]["spec"]["containers"][0]
    assert "workerGroupSpecs" not in job["spec"]["rayClusterSpec"]
    assert "[WARNING K8S003] cluster.kubernetes.output_claim" in err  # no claim: the output dies with the pods


def test_the_schema_check_is_not_vacuous(validator):
    job = rayjob_manifest(compose_shipped(GPU_CLUSTER), 60.0)
    job["spec"]["shutdownAfterJobFinish"] = True  # a typo of the real field
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "1"  # a string where KubeRay takes int32
    del job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"]
    messages = " | ".join(e.message for e in validator.iter_errors(job))
    assert "'shutdownAfterJobFinish' was unexpected" in messages
    assert "'1' is not of type 'integer'" in messages and "'groupName' is a required property" in messages


def test_no_image_or_a_relative_mount_is_refused_and_nothing_is_written(tmp_path, capsys):
    assert main(["rayjob", "recipe=tiny_grpo", f"run.output_dir={tmp_path}"]) == 1
    err = capsys.readouterr().err
    assert "[ERROR K8S001] cluster.kubernetes.image" in err and "cluster.kubernetes.image=IMAGE" in err
    assert main(["rayjob", "recipe=tiny_grpo", "cluster.kubernetes.image=i", "cluster.kubernetes.output_claim=c"]) == 1
    assert "[ERROR K8S002] run.output_dir: run.output_dir=runs is relative" in capsys.readouterr().err
    assert not (tmp_path / "tiny_grpo").exists()


def test_written_next_to_the_plan_and_dry_run_writes_nothing(tmp_path, capsys):
    overrides = ["recipe=tiny_grpo", "cluster.kubernetes.image=i", f"run.output_dir={tmp_path}"]
    assert main(["rayjob", "--dry-run", *overrides]) == 0
    printed = capsys.readouterr()
    assert "[WARNING K8S003] cluster.kubernetes.output_claim" in printed.err
    assert not (tmp_path / "tiny_grpo").exists()
    assert main(["rayjob", *overrides]) == 0
    manifest = tmp_path / "tiny_grpo" / "rayjob.yaml"
    assert f"kubectl apply -f {manifest}" in capsys.readouterr().out
    assert manifest.read_text() == printed.out and (tmp_path / "tiny_grpo" / "plan.json").is_file()


def test_a_secret_on_the_command_line_is_refused(capsys):
    assert main(["rayjob", "recipe=tiny_grpo", "cluster.kubernetes.image=i", "+env.HF_TOKEN=s3cret"]) == 2
    err = capsys.readouterr().err
    assert "+env.HF_TOKEN" in err and "s3cret" not in err


@pytest.mark.parametrize("run_name, name", [("tiny_grpo", "tiny-grpo"), ("DAPO.Sync/sweep/3", "dapo-sync-sweep-3"),
                                            ("7b_run", "run-7b-run"), ("x" * 60, "x" * NAME_MAX)])
def test_run_name_becomes_a_dns_1035_label(run_name, name):
    assert rayjob_name(run_name) == name


def test_the_pods_termination_grace_is_the_runs_preemption_grace(validator, capsys):
    import math

    from launcher.plan import make_plan
    from launcher.plan.preemption import grace_s

    job, _ = _written(GPU_CLUSTER, capsys)
    config = compose_shipped(GPU_CLUSTER).config
    derived = math.ceil(grace_s(config, make_plan(config))[0])
    assert {pod["terminationGracePeriodSeconds"] for pod in _pods(job)} == {derived}
    job, _ = _written([*GPU_CLUSTER, "run.preemption_grace_s=1234.5"], capsys)
    assert [e.message for e in validator.iter_errors(job)] == []
    assert {pod["terminationGracePeriodSeconds"] for pod in _pods(job)} == {1235}
