"""`jobs`: the Ray jobs `submit` sent, from the jobs.json files under run.output_dir, each with its
live state from the cluster's job API (PENDING / RUNNING / SUCCEEDED / FAILED / STOPPED); points
that were refused (illegal, locked) are listed as not submitted."""
import json
import sys
from pathlib import Path

from launcher.cli.args import UsageError
from launcher.cli.submit import SUMMARY_NAME, job_client
from launcher.config.compose import compose
from launcher.exit_codes import ExitCode


def summary_records(output_dir: Path) -> list[dict]:
    """Every record of every `<output_dir>/<run.name>/jobs.json`, oldest file first."""
    files = sorted(Path(output_dir).glob(f"*/{SUMMARY_NAME}"), key=lambda f: f.stat().st_mtime)
    return [record for f in files for record in json.loads(f.read_text())]


def _states(records: list[dict]) -> dict[str, str]:
    """job id -> state, one client per dashboard; an unreachable one gives `unknown (...)` (why: on stderr)."""
    states: dict[str, str] = {}
    for url in sorted({r["dashboard"] for r in records if r.get("job_id")}):
        try:
            client = job_client(url)
        except UsageError as err:
            sys.stderr.write(f"jobs: {err}\n")
            reason = f"unknown (no job API at {url})"
            states.update({r["job_id"]: reason for r in records if r.get("dashboard") == url})
            continue
        known = {j.submission_id: j.status.value for j in client.list_jobs() if j.submission_id}
        states.update({r["job_id"]: known.get(r["job_id"], "unknown (not on this cluster)")
                       for r in records if r.get("dashboard") == url})
    return states


def job_rows(records: list[dict]) -> list[dict]:
    """One row per point: job id (or None), state, run dir, overrides."""
    states = _states(records)
    return [{"job_id": r["job_id"], "state": states[r["job_id"]] if r["job_id"] else f"not submitted ({r['status']})",
             "run_dir": r["run_dir"], "overrides": r["overrides"], "submitted": r["submitted"],
             "reason": r["reason"]} for r in records]


def cmd_jobs(overrides: list[str], fmt: str) -> int:
    output_dir = Path(compose(overrides).config.run.output_dir)
    rows = job_rows(summary_records(output_dir))
    if fmt == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return ExitCode.OK
    if not rows:
        sys.stdout.write(f"no submitted jobs under {output_dir.resolve()} (python -m launcher submit ...)\n")
    for row in rows:
        where = row["run_dir"] or row["reason"]
        sys.stdout.write(f"{row['submitted']}  {row['job_id'] or '-':<30} {row['state']:<28} {where}\n"
                         f"    {' '.join(row['overrides']) or '(defaults)'}\n")
    return ExitCode.OK
