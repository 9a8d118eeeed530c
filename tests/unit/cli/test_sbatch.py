"""`sbatch` writes a Slurm script that brings Ray up on the allocation and runs the checked run on it.
Checked here for content and by `bash -n`; not run against a Slurm (no cluster here)."""
import subprocess

from launcher.__main__ import main


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
    assert f"run.output_dir={tmp_path}" in run_line and run_line.endswith('cluster.ray_address="$address"')
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
    from launcher.cli.slurm_preflight import GPU_GRES, Partition, shortfall

    assert [int(GPU_GRES.search(g).group(1)) for g in ("gpu:2", "gpu:h100:8(S:0-1)", "craynetwork:4,gpu:a100:4")] == \
        [2, 8, 4]
    assert GPU_GRES.search("(null)") is None
    part = Partition("batch", nodes=4, gpus_per_node=8)
    assert shortfall(part, 4, 8) is None
    assert shortfall(part, 8, 8) == "cluster.nodes=8 but partition batch has 4 node(s)"
    assert "offer 8 GPU(s) each" in shortfall(part, 2, 16)
