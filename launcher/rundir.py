"""The run directory: resolved config, overrides and plan, written before Ray starts.

Written into a temporary sibling and renamed into place, so a failure (or Ctrl-C)
while writing never leaves a half-written run directory behind.
"""
import json
import os
import shutil
import tempfile
from pathlib import Path

import yaml

from launcher.compose import Composed
from launcher.secrets import mask_override, mask_secrets


def run_dir_of(composed: Composed, suffix: str = "") -> Path:
    """`<output_dir>/<run.name>`, or a sub-folder per sweep point."""
    run = composed.config.run
    return Path(run.output_dir) / run.name / suffix if suffix else Path(run.output_dir) / run.name


def resolved_yaml(composed: Composed) -> str:
    """The composed config as YAML with secrets masked (what `plan` and `--cfg job` print)."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(composed.cfg, resolve=True, enum_to_str=True)
    return yaml.safe_dump(mask_secrets(plain), sort_keys=False)


def write_run_files(composed: Composed, plan: dict | None, suffix: str = "") -> Path:
    """Write config.yaml, overrides.yaml and plan.json into the run directory, atomically per file set."""
    target = run_dir_of(composed, suffix)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        (staging / "config.yaml").write_text(resolved_yaml(composed))
        overrides = {"choices": composed.choices, "overrides": [mask_override(o) for o in composed.overrides]}
        (staging / "overrides.yaml").write_text(yaml.safe_dump(overrides, sort_keys=False))
        if plan is not None:
            (staging / "plan.json").write_text(json.dumps(mask_secrets(plan), indent=2))
        target.mkdir(exist_ok=True)
        for item in staging.iterdir():
            os.replace(item, target / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
