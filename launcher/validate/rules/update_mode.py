"""`inference.update_mode: in_flight` (weight updates at a token boundary of the chunk being
generated, weight_sync/update_gate.py): what can take an update mid-chunk, refused before Ray."""
from launcher.config.schema.choices import InferenceBackendName, PlacementMode, UpdateMode
from launcher.validate.registry import error, rule
from launcher.vllm_release import installed_version, release_of


def _in_flight(cfg) -> bool:
    return cfg.inference.update_mode is UpdateMode.in_flight


@rule("INF014")
def in_flight_needs_weight_version_spans(cfg, plan):
    """A vLLM engine pauses an in-flight chunk between two of its engine steps for an update;
    which version sampled which token it learns from vLLM's weight-version spans, which the
    installed release must have (launcher/vllm_release.py). Not checked where vLLM is not
    installed (pre-commit): the engine then fails to import."""
    version = installed_version()
    release = release_of(version) if version else None
    if not _in_flight(cfg) or cfg.inference.backend is not InferenceBackendName.vllm or release is None:
        return
    if not release.weight_version_spans:
        yield error("inference.update_mode", f"inference.update_mode=in_flight with vLLM {version} installed",
                    f"vLLM {release.line}'s outputs do not say which weight version sampled which token (no "
                    "CompletionOutput.weight_versions), so a sequence spanning an update could not carry its "
                    "per-token versions, which algorithm.max_staleness and the metrics judge.",
                    "Use inference.update_mode=between_chunks with this vLLM, install vllm 0.32.x, or use "
                    "inference.backend=hf.")


@rule("INF015")
def in_flight_needs_async_placement(cfg, plan):
    """The sync loop never updates an engine that is generating: there is nothing in flight."""
    if _in_flight(cfg) and cfg.placement.mode is not PlacementMode["async"]:
        yield error("inference.update_mode",
                    f"inference.update_mode=in_flight with placement.mode={cfg.placement.mode.value}",
                    "Colocated runs generate, then train, then sync: no update ever meets a chunk in flight, so "
                    "the setting would do nothing.",
                    "Set inference.update_mode=between_chunks, or run async (placement.mode async with its trainer "
                    "and inference nodes and algorithm.max_staleness >= 1, as recipes/tiny_dapo_async.yaml).")


@rule("INF016")
def in_flight_recorders_without_evaluation(cfg, plan):
    """A held-out evaluation runs while a training chunk is paused mid-generation; the hf
    engine's route and indexer recorders hook the model per request, so the paused chunk's
    hooks would also record the evaluation's forwards (vLLM returns routes per request)."""
    if cfg.inference.backend is not InferenceBackendName.hf:
        return
    alg, run = cfg.algorithm, cfg.run
    records = [k for k in ("routing_replay", "routing_agreement", "indexer_replay", "indexer_agreement")
               if getattr(alg, k)]
    if _in_flight(cfg) and records and (run.eval_every_steps or run.eval_before_train):
        yield error("inference.update_mode",
                    f"inference.update_mode=in_flight with algorithm.{records[0]}=true and held-out evaluation "
                    f"(run.eval_every_steps={run.eval_every_steps}, run.eval_before_train={run.eval_before_train})",
                    "An evaluation request runs while a training chunk is paused at a token boundary; the engine's "
                    "route and indexer recorders are hooks on the one model, so the paused chunk's arrays would "
                    "take the evaluation's positions too.",
                    f"Set run.eval_every_steps=0 and run.eval_before_train=false, algorithm.{records[0]}=false, or "
                    "inference.update_mode=between_chunks.")
