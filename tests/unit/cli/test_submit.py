"""`submit` and `jobs` up to the cluster: the dashboard address, the shipped code, the job's overrides
and the refusals that happen before anything is sent (the jobs themselves: tests/integration/test_ray_jobs.py)."""
import json
import shlex

import pytest

from launcher import paths
from launcher.__main__ import main
from launcher.cli.jobs import job_rows
from launcher.cli.submit import dashboard_url, job_overrides
from launcher.config.schema.cluster import ClusterConfig
from launcher.driver.actors.cluster import shipped_code
from launcher.driver.records.rundir import RunDirLock
from launcher.paths import PROJECT_ROOT
from tests.shared_compose import compose_shipped


@pytest.mark.parametrize("ray_address, dashboard, url", [
    ("10.1.2.3:6379", None, "http://10.1.2.3:8265"),
    ("ray://head.example:10001", None, "http://head.example:8265"),
    ("auto", None, "http://127.0.0.1:8265"),
    ("10.1.2.3:6379", "dash.example:9000", "http://dash.example:9000"),
    ("10.1.2.3:6379", "https://dash.example", "https://dash.example"),
])
def test_dashboard_url_derives_host_or_takes_the_key(ray_address, dashboard, url):
    assert dashboard_url(ClusterConfig(ray_address=ray_address, dashboard_address=dashboard)) == url


def test_code_is_shipped_to_a_remote_cluster_only(monkeypatch):
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    shipped = shipped_code(ClusterConfig(ray_address="10.1.2.3:6379"))
    assert paths.checkout_root() == PROJECT_ROOT  # the tests run in the checkout (an editable install)
    assert shipped["working_dir"] == str(PROJECT_ROOT) and "py_modules" not in shipped
    assert {"runs/", ".venv/", ".venv-*/", ".git/", "*.whl", ".pkgs/"} <= set(shipped["excludes"])
    assert shipped_code(ClusterConfig()) == {}, "the embedded Ray runs on this machine, in this checkout"
    assert shipped_code(ClusterConfig(ray_address="10.1.2.3:6379", ship_code=False)) == {}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")  # a job's driver: the job shipped the code already
    assert shipped_code(ClusterConfig(ray_address="10.1.2.3:6379")) == {}


def test_a_wheel_install_ships_its_packages_not_site_packages(monkeypatch, tmp_path):
    """Installed from a wheel, the folder above the package is site-packages: the launcher and model
    packages go as py_modules (launcher's folder carries _shipped/). The real wheel's zips:
    tests/integration/test_install.py."""
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    site = tmp_path / "site-packages"
    (site / "launcher" / "_shipped" / "recipes").mkdir(parents=True)
    monkeypatch.setattr(paths, "_PACKAGE", site / "launcher")
    monkeypatch.setattr(paths, "PROJECT_ROOT", site)
    monkeypatch.setattr(paths, "PACKAGE_DIR", site / "launcher")
    assert paths.checkout_root() is None
    shipped = shipped_code(ClusterConfig(ray_address="10.1.2.3:6379"))
    assert "working_dir" not in shipped
    assert shipped["py_modules"] == [str(site / "launcher"), str(PROJECT_ROOT / "model")]
    assert "__pycache__/" in shipped["excludes"] and "*.safetensors" in shipped["excludes"]


def test_a_folder_without_pyproject_above_the_package_is_no_checkout(monkeypatch, tmp_path):
    """A wheel whose _shipped/ went missing still never ships the folder above it (site-packages)."""
    (tmp_path / "launcher").mkdir()
    monkeypatch.setattr(paths, "_PACKAGE", tmp_path / "launcher")
    monkeypatch.setattr(paths, "PROJECT_ROOT", tmp_path)
    assert paths.checkout_root() is None


def test_job_overrides_pin_an_absolute_run_dir_per_sweep_point(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    point = ["recipe=tiny_grpo", "run.output_dir=rel/out", "run.name=sw", "run.seed=3"]
    got = job_overrides(point, compose_shipped(point), "sweep/2")
    assert got == ["recipe=tiny_grpo", "run.seed=3", f"run.output_dir={tmp_path / 'rel/out'}", "run.name=sw/sweep/2"]
    assert compose_shipped(got).config.run.name == "sw/sweep/2"


def test_submit_without_ray_address_names_the_key(capsys, tmp_path):
    assert main(["submit", "recipe=tiny_grpo", f"run.output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "submit needs cluster.ray_address" in err and "cluster.ray_address=HEAD_HOST:6379" in err
    assert list(tmp_path.iterdir()) == []


def test_submit_refuses_a_secret_on_the_command_line(capsys, tmp_path):
    code = main(["submit", "recipe=tiny_grpo", "cluster.ray_address=10.1.2.3:6379", "+env.HF_TOKEN=hunter2",
                 f"run.output_dir={tmp_path}"])
    out = capsys.readouterr()
    assert code == 2 and "+env.HF_TOKEN" in out.err and "job table" in out.err
    assert "hunter2" not in out.out + out.err
    assert list(tmp_path.iterdir()) == []


def test_jobs_reports_an_unreachable_dashboard_and_unsubmitted_points(tmp_path, capsys):
    records = [{"index": 0, "overrides": ["run.seed=0"], "status": "submitted", "reason": "", "submitted": "t",
                "run_dir": str(tmp_path / "sw/sweep/0"), "job_id": "raysubmit_x", "dashboard": "http://127.0.0.1:1"},
               {"index": 1, "overrides": ["run.seed=1"], "status": "illegal", "reason": "BATCH003 ...",
                "submitted": "t", "run_dir": None, "job_id": None}]
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "jobs.json").write_text(json.dumps(records))
    rows = job_rows(records)
    assert rows[0]["state"] == "unknown (no job API at http://127.0.0.1:1)"
    assert "no Ray job API at http://127.0.0.1:1 (cluster.dashboard_address)" in capsys.readouterr().err
    assert rows[1]["state"] == "not submitted (illegal)"
    assert main(["jobs", f"run.output_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "raysubmit_x" in out and "not submitted (illegal)" in out and "BATCH003" in out


def test_point_whose_run_dir_a_live_run_holds_is_refused_before_anything_is_sent(tmp_path, capsys):
    # The dashboard address answers nothing: reaching for it would be a usage error (exit 2), not exit 1.
    keys = ["recipe=tiny_grpo", f"run.output_dir={tmp_path}", "run.name=held", "cluster.ray_address=127.0.0.1:1",
            "cluster.dashboard_address=http://127.0.0.1:1"]
    with RunDirLock(tmp_path / "held" / "sweep" / "0"):
        assert main(["-m", "submit", *keys, "run.seed=0"]) == 1
    out = capsys.readouterr()
    assert "is in use by a live run" in out.err and "no Ray job API" not in out.err
    (record,) = json.loads((tmp_path / "held" / "jobs.json").read_text())
    assert record["status"] == "locked" and record["job_id"] is None
    assert record["run_dir"] == str(tmp_path / "held" / "sweep" / "0")


class _FakeJobClient:
    """Ray's JobSubmissionClient as far as `submit` uses it: each job gets the next id."""

    def __init__(self):
        self.entrypoints: list[str] = []

    def submit_job(self, entrypoint: str, runtime_env: dict, metadata: dict) -> str:
        self.entrypoints.append(entrypoint)
        return f"raysubmit_{len(self.entrypoints)}"


def test_submit_format_json_prints_one_object_with_job_ids_addresses_and_run_dirs(tmp_path, capsys, monkeypatch):
    client = _FakeJobClient()
    monkeypatch.setattr("launcher.cli.submit.job_client", lambda url: client)
    keys = ["recipe=tiny_grpo", f"run.output_dir={tmp_path}", "run.name=js", "cluster.ray_address=10.1.2.3:6379"]
    assert main(["-m", "submit", "--format", "json", *keys, "algorithm.samples_per_prompt=4,1"]) == 0
    printed = json.loads(capsys.readouterr().out)  # stdout is the object alone: no table, no progress lines
    assert printed["jobs_file"] == str(tmp_path / "js" / "jobs.json")
    sent, illegal = printed["jobs"]
    assert (sent["job_id"], sent["status"], sent["ray_address"], sent["dashboard"], sent["run_dir"]) == (
        "raysubmit_1", "submitted", "10.1.2.3:6379", "http://10.1.2.3:8265", str(tmp_path / "js" / "sweep" / "0"))
    assert (illegal["job_id"], illegal["status"], illegal["run_dir"]) == (None, "illegal", None)
    assert illegal["reason"].startswith("BATCH003")
    assert json.loads((tmp_path / "js" / "jobs.json").read_text()) == printed["jobs"]
    assert len(client.entrypoints) == 1


def test_submit_format_json_with_no_legal_point_prints_the_refusals(tmp_path, capsys):
    keys = ["recipe=tiny_grpo", f"run.output_dir={tmp_path}", "cluster.ray_address=10.1.2.3:6379"]
    assert main(["submit", "--format", "json", *keys, "algorithm.samples_per_prompt=1"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["jobs_file"] is None and [j["status"] for j in printed["jobs"]] == ["illegal"]
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_over_cluster_addresses_sends_each_point_to_its_own_cluster(tmp_path, capsys, monkeypatch):
    clients: dict[str, _FakeJobClient] = {}
    monkeypatch.setattr("launcher.cli.submit.job_client", lambda url: clients.setdefault(url, _FakeJobClient()))
    keys = ["recipe=tiny_grpo", f"run.output_dir={tmp_path}", "run.name=two"]
    assert main(["-m", "submit", "--format", "json", *keys, "cluster.ray_address=10.0.0.1:6379,10.0.0.2:6379",
                 "cluster.dashboard_address=null,dash.example:9000"]) == 0
    jobs = json.loads(capsys.readouterr().out)["jobs"]
    assert [(j["ray_address"], j["dashboard"]) for j in jobs] == [
        ("10.0.0.1:6379", "http://10.0.0.1:8265"), ("10.0.0.1:6379", "http://dash.example:9000"),
        ("10.0.0.2:6379", "http://10.0.0.2:8265"), ("10.0.0.2:6379", "http://dash.example:9000")]
    assert {url: len(c.entrypoints) for url, c in clients.items()} == {
        "http://10.0.0.1:8265": 1, "http://dash.example:9000": 2, "http://10.0.0.2:8265": 1}
    [sent] = clients["http://10.0.0.2:8265"].entrypoints  # the job runs the point against its own cluster
    assert compose_shipped(shlex.split(sent)[4:]).config.cluster.ray_address == "10.0.0.2:6379"


def test_a_sweep_point_without_a_cluster_address_is_named_before_anything_is_sent(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("launcher.cli.submit.job_client", lambda url: pytest.fail(f"reached for {url}"))
    keys = ["recipe=tiny_grpo", f"run.output_dir={tmp_path}", "cluster.ray_address=10.0.0.1:6379,null"]
    assert main(["-m", "submit", *keys]) == 2
    out = capsys.readouterr()
    assert "submit needs cluster.ray_address (it is null for point(s) #1" in out.err and out.out == ""
    assert list(tmp_path.iterdir()) == []
