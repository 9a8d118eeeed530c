"""The engines' sleep level: `inference.sleep_level`, or derived from the placement and the sync kind.

Sleeping frees a colocated engine's GPU memory for the trainer. Level 1 copies the weights
to host RAM (pinned, per GPU) and drops the KV cache; level 2 drops both, and the next weight
sync brings the weights back. Which is right follows from what the next sync sends:
- merged or full sync re-sends every weight anyway: level 2 (level 1 would keep a copy of
  the whole model per node in host RAM for nothing: ~599 GiB for GLM-5.3-Flash);
- adapter sync sends only the adapters: level 1, the base stays in host RAM and comes back
  with the engine (level 2 would re-send the base at every step);
- async placement: 0, the engines own their GPUs and never sleep.
"""
from launcher.config.schema.choices import PlacementMode
from launcher.config.schema.root import LauncherConfig
from launcher.plan.sync import SyncKind


def derived_sleep_level(colocated: bool, sync_kind: SyncKind) -> tuple[int, str]:
    """(level, why) for a null inference.sleep_level."""
    if not colocated:
        return 0, "async placement: engines own their GPUs and never sleep"
    if sync_kind is SyncKind.adapter:
        return 1, "adapter sync, colocated: the base stays in host RAM while asleep; only adapters move"
    return 2, f"{sync_kind} sync, colocated: every sync re-sends the whole model, so sleeping engines drop theirs"


def resolve_sleep_level(cfg: LauncherConfig, sync_kind: str) -> tuple[int, str]:
    """(the level every engine and the sync loop use, where it came from)."""
    level, why = derived_sleep_level(cfg.placement.mode is PlacementMode.colocated, sync_kind)
    if cfg.inference.sleep_level is None:
        return level, why
    if cfg.inference.sleep_level == level:
        return level, f"inference.sleep_level (set; the derivation agrees: {why})"
    return cfg.inference.sleep_level, f"inference.sleep_level (set; derived would be {level}: {why})"
