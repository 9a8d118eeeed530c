"""`submit` (and `-m submit`): every point is composed, validated and planned here, as `run` and
`-m plan` do, and each legal point goes to its own Ray cluster (the point's cluster.ray_address: a
sweep may vary cluster.*) as a Ray job
(ray.job_submission.JobSubmissionClient, through the dashboard at cluster.dashboard_address) whose
entrypoint is `python -m launcher run <the point's overrides>`, with this launcher shipped through the
job's runtime_env (cluster.ship_code: a checkout as the job's working_dir, a wheel install's packages
as py_modules), so the cluster needs only the venv. Illegal points are listed and never submitted;
a point whose run directory a live run holds (RunDirLock) is refused before submission. Each point's run directory, job id and log
command are printed and appended to `<run.output_dir>/<run.name>/jobs.json`, which `jobs` reads.

    python -m launcher submit cluster.ray_address=HEAD:6379 [overrides]                 a table for people
    python -m launcher submit --format json cluster.ray_address=HEAD:6379 [overrides]   one JSON object for scripts:
        {"jobs_file": ".../jobs.json", "jobs": [{"job_id", "ray_address", "dashboard", "run_dir", "status", ...}]}
"""
import datetime
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from launcher.cli.args import Args, UsageError
from launcher.cli.commands import take_run_dir_lock
from launcher.cli.sweep import _summary, evaluate, expand
from launcher.config.compose_points import PointComposer
from launcher.driver.records.rundir import run_dir_of
from launcher.exit_codes import ExitCode
from launcher.secrets import mask_override
from launcher.validate import check
from launcher.validate.report import findings_text

SUMMARY_NAME = "jobs.json"
DASHBOARD_PORT = 8265  # Ray's default `ray start --dashboard-port`
# Keys the entrypoint sets itself: the run directory must be the one checked here, as an absolute path.
_PLACED_KEYS = ("run.output_dir", "run.name")


def dashboard_url(cluster_cfg) -> str:
    """cluster.dashboard_address, or the host of cluster.ray_address on Ray's default dashboard port."""
    if cluster_cfg.dashboard_address:
        given = cluster_cfg.dashboard_address
        return given if "://" in given else f"http://{given}"
    address = cluster_cfg.ray_address
    host = "127.0.0.1" if address in ("auto", "local") else urlsplit(address if "://" in address else
                                                                     f"//{address}").hostname
    return f"http://{host}:{DASHBOARD_PORT}"


def job_overrides(overrides: list[str], composed, suffix: str) -> list[str]:
    """The point's overrides with the run directory pinned: absolute (the job runs in another working
    directory, on the head node) and, for a sweep point, the same `<name>/sweep/<i>` that `-m plan` uses."""
    run = composed.config.run
    kept = [o for o in overrides if o.partition("=")[0].lstrip("+~") not in _PLACED_KEYS]
    name = f"{run.name}/{suffix}" if suffix else run.name
    return [*kept, f"run.output_dir={os.path.abspath(run.output_dir)}", f"run.name={name}"]


def refuse_secret_overrides(overrides: list[str], where: str) -> None:
    """UsageError when an override sets a secret variable: it would be stored in clear `where`."""
    secret = [o.partition("=")[0] for o in overrides if mask_override(o) != o]
    if secret:
        raise UsageError(f"{', '.join(secret)} on the command line would be stored in clear {where}. Set the "
                         "variable in the cluster's environment, or in the recipe's `env:` as ${oc.env:NAME}, and "
                         "drop the override.")


def _refuse_embedded(legal: list, multirun: bool) -> None:
    """UsageError naming the points whose cluster.ray_address is null (an embedded Ray on this machine),
    raised before anything is printed or sent: a Ray job needs a running cluster."""
    embedded = [p for p, composed in legal if composed.config.cluster.ray_address is None]
    if embedded:
        which = f" for point(s) {', '.join(f'#{p.index}' for p in embedded)}" if multirun else ""
        raise UsageError(f"submit needs cluster.ray_address (it is null{which}, which means an embedded Ray on "
                         "this machine): Ray jobs go to a running cluster. Set cluster.ray_address=HEAD_HOST:6379.")


def job_client(url: str):
    """Ray's JobSubmissionClient for the dashboard at `url`; UsageError (with the fix) when there is no job
    API there or the cluster refuses this machine's token."""
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(url)
    except AuthenticationError as err:
        raise UsageError(f"the Ray cluster at {url} (cluster.dashboard_address) refused the job API request: "
                         f"{str(err).splitlines()[0]}. It uses token auth: set RAY_AUTH_MODE=token and its token "
                         "(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) here.") from None
    except (ConnectionError, RuntimeError) as err:
        raise UsageError(f"no Ray job API at {url} (cluster.dashboard_address): {err} Start the head with "
                         "`ray start --head --include-dashboard=true`, or set cluster.dashboard_address to its "
                         "dashboard (http://host:8265).") from None


def _submit_point(client, url: str, overrides: list[str], run_dir: Path, cluster_cfg) -> dict:
    """One Ray job running the point's run from the shipped working_dir; its id, address and log command.
    `python` is the head node's (the PATH its `ray start` ran with), as for `ray job submit -- python ...`."""
    from launcher.driver.actors.cluster import shipped_code

    entrypoint = shlex.join(["python", "-m", "launcher", "run", *overrides])
    runtime_env = {**shipped_code(cluster_cfg), "env_vars": {"PYTHONUNBUFFERED": "1"}}
    job_id = client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env,
                               metadata={"launcher_run_dir": str(run_dir)})
    return {"job_id": job_id, "ray_address": cluster_cfg.ray_address, "dashboard": url, "entrypoint": entrypoint,
            "logs": f"ray job logs {job_id} --address {url}   (head node: <ray temp dir>/session_latest/logs/"
                    f"job-driver-{job_id}.log)"}


def _write_summary(path: Path, records: list[dict]) -> None:
    """Append this submission's records to jobs.json, replaced atomically (a reader never sees half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(path.read_text()) if path.exists() else []
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as out:
        json.dump(old + records, out, indent=2)
    os.replace(tmp, path)


def _print_warnings(legal: list) -> None:
    """The legal points' warnings, each once (RUN003's shared-storage warning concerns every job of a sweep)."""
    unique = {(f.id, f.key, f.message): f for composed, plan in legal for f in check(composed.config, plan)}
    if unique:
        sys.stderr.write(findings_text(list(unique.values()), "submitting with "))


def _run_dir_free(composed, suffix: str, record: dict) -> bool:
    """Whether no live run holds the point's run directory (RunDirLock), checked before anything is sent;
    a held one marks the record `locked`."""
    run_dir = Path(os.path.abspath(run_dir_of(composed, suffix)))
    record["run_dir"] = str(run_dir)
    lock = take_run_dir_lock(run_dir)
    if lock is None:
        record["status"], record["reason"] = "locked", "run directory in use by a live run"
        return False
    lock.release()  # the job's own driver takes it on the cluster
    return True


def _send(ready: list, records: list[dict], suffix: dict[int, str], echo: bool) -> None:
    """Submit each ready point as a Ray job to its own cluster (a sweep may vary cluster.*), one job
    client per dashboard; its job id, addresses and log command go into its record (and, with `echo`,
    onto the terminal as each is sent)."""
    clients = {}
    for p, composed in ready:
        url = dashboard_url(composed.config.cluster)
        if url not in clients:
            clients[url] = job_client(url)
        record = records[p.index]
        record.update(_submit_point(clients[url], url, job_overrides(p.overrides, composed, suffix[p.index]),
                                    Path(record["run_dir"]), composed.config.cluster))
        record["status"] = "submitted"
        if echo:
            sys.stdout.write(f"  #{p.index:<3} job {record['job_id']}  run dir {record['run_dir']}\n"
                             f"       logs: {record['logs']}\n")


def _report(fmt: str, records: list[dict], summary: Path | None) -> None:
    """The end of a submission: text names jobs.json (the table came first); json prints one object,
    the same records jobs.json holds, so a script reads job ids and run dirs off stdout alone."""
    if fmt == "json":
        sys.stdout.write(json.dumps({"jobs_file": str(summary) if summary else None, "jobs": records}, indent=2) + "\n")
    elif summary is not None:
        sys.stdout.write(f"wrote {summary}; `python -m launcher jobs` shows their state\n")


def cmd_submit(args: Args) -> int:
    refuse_secret_overrides(args.overrides, "in the Ray cluster's job table and job log (the entrypoint)")
    points = expand(args.overrides) if args.multirun else [args.overrides]
    composer = PointComposer()
    results = [evaluate(i, p, composer) for i, p in enumerate(points)]
    legal = [(p, c) for p, c, _ in results if c is not None]
    _refuse_embedded(legal, args.multirun)
    if args.format == "text":
        sys.stdout.write(_summary([p for p, _, _ in results]))
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    records = [{"index": p.index, "overrides": p.overrides, "status": p.status, "reason": p.first_error,
                "run_dir": None, "job_id": None, "submitted": when} for p, _, _ in results]
    if not legal:
        _report(args.format, records, None)
        return ExitCode.REFUSED
    _print_warnings([(c, plan) for _, c, plan in results if c is not None])
    suffix = {p.index: f"sweep/{p.index}" if args.multirun else "" for p, _ in legal}
    ready = [(p, c) for p, c in legal if _run_dir_free(c, suffix[p.index], records[p.index])]
    summary = Path(os.path.abspath(run_dir_of(legal[0][1]))) / SUMMARY_NAME
    try:
        _send(ready, records, suffix, echo=args.format == "text")
    finally:  # the jobs already sent (and the refused points) stay listed even when a submission fails
        _write_summary(summary, records)
    _report(args.format, records, summary)
    return ExitCode.REFUSED if any(r["status"] == "locked" for r in records) else ExitCode.OK
