"""`sbatch` writes a Slurm script that brings Ray up on the allocation and runs the checked run on it.
Checked here for content, `bash -n`, its --time arithmetic and its flags, with stand-in `sinfo` and
`sbatch` scripts on PATH where Slurm's answers matter; under a real Slurm in tests/integration/test_slurm.py."""
import math
import subprocess
from pathlib import Path

import pytest

from launcher.__main__ import main
from launcher.cli.slurm_preflight import GPU_GRES, Partition, shortfall, slurm_seconds
from launcher.cli.slurm_time import TIME_MARGIN, TimeLimit, checkpoints_written, time_limit
from launcher.driver.actors.deadlines import phase_estimates_s
from launcher.validate import plan_and_check
from tests.shared_compose import compose_shipped

BRING_UP_S = 600  # sbatch's: the head's readiness wait, then the workers'


def test_script_starts_ray_on_every_node_runs_and_stops_it(tmp_path, capsys, monkeypatch):
    here = tmp_path / "our repo"  # where sbatch is called: the run's relative data paths resolve from it
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["sbatch", "recipe=dapo_sync", "cluster=b300x3", "inference.engines=3",
                 f"run.output_dir={tmp_path}"]) == 0
    script = tmp_path / "dapo_sync" / "sbatch.sh"
    text = script.read_text()
    assert f"\ncd '{here}'\n" in text  # quoted: the folder's name has a space
    assert str(script) in capsys.readouterr().out
    assert "#SBATCH --nodes=3" in text and "#SBATCH --gpus-per-node=8" in text
    assert text.count("--num-gpus=8") == 2  # the head and each worker declare the cluster file's GPUs
    assert "ray start --head" in text and 'ray start --address="$address"' in text
    assert text.index("wait_for_nodes 1") < text.index('for node in "${nodes[@]:1}"') < text.index("wait_for_nodes 3")
    run_line = next(line for line in text.splitlines() if "-m launcher run" in line)
    assert "recipe=dapo_sync cluster=b300x3 inference.engines=3" in run_line
    assert f"run.output_dir={tmp_path}" in run_line and run_line.endswith('cluster.ray_address="$address" &')
    assert text.index("trap stop_ray EXIT") < text.index("ray start --head") and "stop --force" in text
    assert (tmp_path / "dapo_sync" / "plan.json").is_file()
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_illegal_run_gets_no_script(tmp_path, capsys):
    assert main(["sbatch", "recipe=dapo_sync", "trainer.mesh.pp=3", f"run.output_dir={tmp_path}"]) == 1
    assert "refusing to write the batch script" in capsys.readouterr().err
    assert not (tmp_path / "dapo_sync").exists()


def test_secret_override_is_refused(tmp_path, capsys):
    assert main(["sbatch", "recipe=dapo_sync", "+env.WANDB_API_KEY=s3cret", f"run.output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "+env.WANDB_API_KEY" in err and "s3cret" not in err
    assert not (tmp_path / "dapo_sync").exists()


def test_the_partition_preflight_reads_gpu_gres_and_names_what_is_lacking():
    assert [int(GPU_GRES.search(g).group(1)) for g in ("gpu:2", "gpu:h100:8(S:0-1)", "craynetwork:4,gpu:a100:4")] == \
        [2, 8, 4]
    assert GPU_GRES.search("(null)") is None
    part, limit = Partition("batch", nodes=4, gpus_per_node=8), _limit(steps=10)
    assert shortfall(part, 4, 8, limit) == []
    assert shortfall(part, 8, 8, limit) == [("cluster.nodes=8 but partition batch has 4 node(s)",
                                             "set cluster.nodes <= 4, or use a cluster file that describes batch")]
    [(what, fix)] = shortfall(part, 2, 16, limit)
    assert "offer 8 GPU(s) each" in what and "cluster.gpus_per_node <= 8" in fix


@pytest.mark.parametrize("text, seconds", [
    ("30", 1800), ("30:00", 1800), ("5:30", 330), ("2:00:00", 7200), ("1-12", 129600), ("1-12:30", 131400),
    ("1-12:30:15", 131415), ("0-00:15:00", 900), ("infinite", None), ("UNLIMITED", None), ("n/a", None)])
def test_slurm_seconds_reads_sinfo_and_sbatch_time_forms(text, seconds):
    assert slurm_seconds(text) == seconds


def test_slurm_seconds_refuses_four_fields():
    with pytest.raises(ValueError, match="'1:2:3:4' is no Slurm time"):
        slurm_seconds("1:2:3:4")


@pytest.mark.parametrize("steps, every, written", [(2, 50, 1), (100, 50, 2), (101, 50, 3), (7, 0, 1), (6, 2, 3)])
def test_checkpoints_written_counts_the_periodic_and_the_final_one(steps, every, written):
    assert checkpoints_written(steps, every) == written


def test_the_time_limit_is_the_margin_over_the_plans_phases_in_whole_minutes():
    composed = compose_shipped(["recipe=dapo_sync", "cluster=b300x3", "inference.engines=3", "checkpoint.every_steps=4",
                                "run.steps=10"])
    _, plan = plan_and_check(composed)
    phases = phase_estimates_s(plan, composed.config.cluster.gpus_per_node)
    step = phases["generation + weight sync"] + phases["log-prob pass"] + phases["training"]
    work = phases["start-up"] + 10 * step + 3 * phases["checkpoint"]  # steps 4 and 8, then the last
    limit = time_limit(composed.config, plan, bring_up_s=BRING_UP_S)
    assert limit.seconds == math.ceil((TIME_MARGIN * work + BRING_UP_S) / 60) * 60 and limit.seconds % 60 == 0
    assert f"10 steps x {step:.1f} s + 3 checkpoint(s)" in limit.basis
    longer = time_limit(compose_shipped([*composed.overrides, "run.steps=20"]).config, plan, bring_up_s=BRING_UP_S)
    assert longer.seconds > limit.seconds


def _limit(steps: int) -> TimeLimit:
    """60 s start-up, 100 s steps, 30 s checkpoints every 10 steps, 600 s bring-up."""
    return TimeLimit(steps=steps, step_s=100, startup_s=60, checkpoint_s=30, every_steps=10, bring_up_s=BRING_UP_S)


def test_a_partition_time_limit_below_the_jobs_names_the_steps_that_fit():
    limit = _limit(steps=100)  # 2 x (60 + 10000 + 300) + 600 = 21320 s -> 21360 s
    assert (limit.seconds, limit.slurm) == (21360, "0-05:56:00")
    assert (limit.seconds_for(25), limit.seconds_for(26)) == (5940, 6120)  # 2 x (60 + 2500 + 90) + 600
    [(what, fix)] = shortfall(Partition("short", 4, 8, max_time_s=6000), 1, 8, limit)
    assert what.startswith("run.steps=100 needs --time=0-05:56:00 (2 x (start-up 60 s + 100 steps x 100.0 s")
    assert what.endswith("but partition short allows 0-01:40:00")
    assert fix.startswith("set run.steps=25 (the most that fit); with run.resume=auto")
    [(_, fix)] = shortfall(Partition("tiny", 4, 8, max_time_s=600), 1, 8, limit)
    assert fix.startswith("even start-up and one step need --time=0-00:17:00")
    assert shortfall(Partition("long", 4, 8, max_time_s=limit.seconds), 1, 8, limit) == []


def _stand_in(folder: Path, name: str, body: str) -> None:
    """An executable `name` in `folder` that runs `body` (a bash line), as Slurm's command would answer."""
    (folder / name).write_text(f"#!/bin/bash\n{body}\n")
    (folder / name).chmod(0o755)


@pytest.fixture
def slurm_bin(tmp_path, monkeypatch):
    """A folder of stand-in Slurm commands, alone on PATH (no real Slurm's answers leak in)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return folder


def test_dry_run_prints_the_script_with_its_time_and_writes_nothing(tmp_path, capsys, slurm_bin):
    _stand_in(slurm_bin, "sbatch", f"touch {tmp_path}/submitted")
    assert main(["sbatch", "--dry-run", "recipe=tiny_grpo", "run.steps=2", f"run.output_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/bin/bash\n") and "\n#SBATCH --time=0-00:" in out
    assert "\n# --time: 2 x (start-up " in out and "2 steps x" in out
    assert f"#SBATCH --output={tmp_path}/tiny_grpo/slurm-%j.out" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]  # no run dir, no plan, no submission


def test_a_partition_shorter_than_the_job_is_refused_before_a_script(tmp_path, capsys, slurm_bin):
    _stand_in(slurm_bin, "sinfo", "echo 'debug*|1|gpu:2|5:00'")
    assert main(["sbatch", "recipe=tiny_grpo", "run.steps=2", f"run.output_dir={tmp_path}"]) == 1
    err = capsys.readouterr().err
    assert "refusing to write the batch script: run.steps=2 needs --time=0-00:" in err
    assert "but partition debug allows 0-00:05:00" in err and "even start-up and one step need" in err
    assert not (tmp_path / "tiny_grpo").exists()


def test_submit_without_sbatch_on_path_says_where_to_submit_it(tmp_path, capsys, slurm_bin):
    assert main(["sbatch", "--submit", "recipe=tiny_grpo", f"run.output_dir={tmp_path}"]) == 2
    script = tmp_path / "tiny_grpo" / "sbatch.sh"
    err = capsys.readouterr().err
    assert f"usage error: --submit needs Slurm's `sbatch` on PATH; {script} is written" in err
    assert script.is_file()


def test_submit_hands_the_script_to_sbatch_and_prints_the_job(tmp_path, capsys, slurm_bin):
    _stand_in(slurm_bin, "sbatch", f'echo "$@" > {tmp_path}/args; echo "4711;launchertest"')
    assert main(["sbatch", "--submit", "recipe=tiny_grpo", f"run.output_dir={tmp_path}"]) == 0
    script = tmp_path / "tiny_grpo" / "sbatch.sh"
    assert (tmp_path / "args").read_text() == f"--parsable {script}\n"
    out = capsys.readouterr().out
    assert f"submitted batch job 4711: {script}" in out and "scancel 4711" in out


def test_sbatchs_refusal_is_passed_on(tmp_path, capsys, slurm_bin):
    _stand_in(slurm_bin, "sbatch", "echo 'sbatch: error: Batch job submission failed: Invalid account' >&2; exit 1")
    assert main(["sbatch", "--submit", "recipe=tiny_grpo", f"run.output_dir={tmp_path}"]) == 1
    assert "Invalid account" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["plan", "--dry-run"], "--dry-run works with sbatch or rayjob, not `plan`"),
    (["--dry-run"], "--dry-run works with sbatch or rayjob, not `run`"),
    (["rayjob", "--submit"], "--submit works with sbatch, not `rayjob`"),
    (["sbatch", "--dry-run", "--submit"], "pick one"),
])
def test_job_file_flags_need_a_command_that_writes_one(argv, message, capsys):
    assert main([*argv, "recipe=tiny_grpo"]) == 2
    assert message in capsys.readouterr().err


def test_the_script_asks_for_the_preemption_signal_forwards_it_and_requeues(tmp_path, capsys):
    """--signal=B:USR1@<run.preemption_grace_s> (derived from the plan when null, counted into --time),
    USR1/USR2 handed to the launcher, a 138 requeued, and a requeued job resuming whatever run.resume said."""
    from launcher.plan.preemption import grace_s

    overrides = ["recipe=tiny_grpo", "run.steps=2", f"run.output_dir={tmp_path}", "run.resume=never"]
    assert main(["sbatch", "--dry-run", *overrides]) == 0
    derived = capsys.readouterr().out
    composed = compose_shipped(overrides)
    seconds, basis = grace_s(composed.config, plan_and_check(composed)[1])
    assert f"\n#SBATCH --signal=B:USR1@{math.ceil(seconds)}\n" in derived and basis in derived
    assert "\n#SBATCH --requeue\n" in derived and "\n#SBATCH --open-mode=append\n" in derived
    assert "trap 'stop USR1' USR1" in derived and "trap 'stop USR2' USR2" in derived
    assert '\nresume=never\n[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && resume=auto' in derived
    run_line = next(line for line in derived.splitlines() if "-m launcher run" in line)
    assert "run.resume=never" not in run_line and 'run.resume="$resume"' in run_line
    assert 'if [ "$rc" = 138 ]; then' in derived and 'scontrol requeue "$SLURM_JOB_ID"' in derived
    assert main(["sbatch", "--dry-run", *overrides, "run.preemption_grace_s=900"]) == 0
    given = capsys.readouterr().out
    assert "\n#SBATCH --signal=B:USR1@900\n" in given and "900 s: run.preemption_grace_s=900." in given
    limits = [slurm_seconds(text.split("#SBATCH --time=")[1].split()[0]) for text in (derived, given)]
    assert abs(limits[1] - limits[0] - (900 - seconds)) < 60  # the grace is inside the limit, in whole minutes
    assert main(["sbatch", "--dry-run", *overrides, "run.preemption_grace_s=70000"]) == 1
    assert "more than the 65535 s Slurm's --signal takes" in capsys.readouterr().err
