"""`--help` and `--version` text: commands, config groups with their options, the key reference."""
from importlib import metadata

from launcher.config.files import available
from launcher.config.schema.docs import key_reference

USAGE = """\
GLM-5.3-Flash RL launcher: validate -> plan -> Ray -> train.

  python -m launcher [overrides]                  run (default recipe: tiny_grpo_chat)
  python -m launcher plan [overrides]             checks + plan tables; starts nothing
  python -m launcher validate [overrides] [--all [--root DIR]] [--format text|json]
  python -m launcher mesh [overrides] [--format text|json]   legal meshes, ranked
  python -m launcher -m plan trainer.mesh.tp=2,4  sweep (every point validated first)
  python -m launcher export CHECKPOINT_DIR OUT_DIR [--adapter]   HF folder (LoRA merged) or PEFT adapter
  python -m launcher eval CHECKPOINT_DIR [overrides] [--format json]   held-out greedy / mean@k scores
  python -m launcher [-m] submit cluster.ray_address=HOST:6379 [overrides] [--format json]   each legal point as a Ray job
  python -m launcher jobs [run.output_dir=DIR] [--format json]   submitted jobs and their live state
  python -m launcher sbatch [overrides] [--dry-run | --submit]   a Slurm script: Ray on the allocation, then the run
  python -m launcher rayjob [overrides] [--dry-run]   a KubeRay RayJob manifest (`kubectl apply -f` it)

Flags: -m/--multirun, --cfg job|all (print the composed config and exit),
       --keep sequences_per_step (plan: re-plan the batch for this cluster),
       --adapter (export: the LoRA adapter as a PEFT folder instead of the merged model),
       --dry-run (sbatch, rayjob: print the script or manifest; write nothing), --submit (sbatch: and sbatch it),
       --root DIR (a config root: DIR's recipes/, clusters/, model/descriptors/ join the shipped ones;
                   validate --all --root DIR checks DIR's recipes only: the pre-commit hook),
       --help keys (every config key with its meaning), --version
Overrides use Hydra's grammar: recipe=NAME cluster=NAME model=NAME section.key=value
"""


DISTRIBUTION = "glm5-rl-launcher"


def version_text() -> str:
    """The installed distribution's version and where the package was imported from (a wheel's
    copy or a checkout), the two facts a bug report about an install needs."""
    from launcher.paths import shipped_root

    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = "(not installed)"
    return f"{DISTRIBUTION} {version} (configs: {shipped_root()})\n"


def help_text(topic: str) -> str:
    if topic == "keys":
        return "\n".join(f"{key} ({tp}): {doc}" for key, tp, doc in key_reference()) + "\n"
    groups = "\n".join(f"  {g}: {', '.join(sorted(available(g)))}" for g in ("recipe", "cluster", "model"))
    sections = ", ".join(k for k, _, _ in key_reference() if "." not in k)
    return f"{USAGE}\nConfig groups:\n{groups}\n\nSections: {sections}\n"
