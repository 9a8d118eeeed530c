"""What a Megatron trainer checkpoint is of, and whether it can resume this run.

trainer.json (checkpoint.py) carries identity(config): the kind (full | lora), the LoRA
settings, and the base the adapters fit (the HF folder's fingerprint, launcher/contract/
base_identity.py, or a random init's seed and architecture). check_identity refuses a
resume that would load adapters onto other weights or mix full and LoRA fine-tuning.
"""
import dataclasses
import hashlib
import json

from launcher.contract.errors import CheckpointMismatchError
from launcher.weight_sync.base_identity import base_fingerprint


def _plain(value):
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:
        pass
    return value


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def identity(config) -> dict:
    """What this run's checkpoints are of: kind, LoRA settings, the base weights (the HF
    folder and its fingerprint, or the random init's seed and architecture)."""
    lora = config.trainer.lora
    if config.model.hf_path:
        base = {"hf_path": str(config.model.hf_path), "sha256": base_fingerprint(config.model.hf_path)}
    else:
        arch = json.dumps(_plain(config.model.arch), sort_keys=True, default=str)
        base = {"random_init_seed": int(config.run.seed), "arch_sha256": _sha256(arch.encode())}
    adapters = None
    if lora.rank > 0:
        adapters = {"rank": int(lora.rank), "alpha": float(lora.alpha), "targets": sorted(lora.targets),
                    "share_expert_adapters": bool(lora.share_expert_adapters),
                    "normalize_moe_lora": bool(lora.normalize_moe_lora)}
    return {"kind": "lora" if adapters else "full", "lora": adapters, "base": base}


def check_identity(path: str, saved: dict, current: dict) -> None:
    """Raise CheckpointMismatchError when `saved` (trainer.json) cannot resume `current`."""
    if saved["kind"] != current["kind"]:
        raise CheckpointMismatchError(
            f"{path} is a {saved['kind']} fine-tuning checkpoint but this run does {current['kind']} fine-tuning "
            "(trainer.lora.rank decides): resume with the settings it was written with, or start a new run.name")
    if saved["kind"] != "lora":
        return  # full fine-tuning holds every weight: the base it started from does not matter
    if saved["lora"] != current["lora"]:
        raise CheckpointMismatchError(f"{path} holds adapters for trainer.lora={saved['lora']} but this run has "
                                      f"trainer.lora={current['lora']}: resume with the same trainer.lora settings")
    was, now = saved["base"], current["base"]
    same = (was.get("sha256") == now.get("sha256") if "sha256" in was or "sha256" in now
            else was == now)
    if not same:
        raise CheckpointMismatchError(
            f"{path} holds LoRA adapters trained on base {_describe(was)}, but this run's base is {_describe(now)}: "
            "adapters only fit the weights they were trained on. Resume with that model.hf_path (or run.seed and "
            "model.arch for a random init), or start a new run.name")


def _describe(base: dict) -> str:
    if "sha256" in base:
        return f"model.hf_path={base['hf_path']} (model.safetensors.index.json sha256 {base['sha256'][:16]})"
    return f"random init run.seed={base['random_init_seed']} (model.arch sha256 {base['arch_sha256'][:16]})"

