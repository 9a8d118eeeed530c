"""`inference.update_mode: in_flight` (weight updates at a token boundary of the chunk being
generated, weight_sync/update_gate.py): what can take an update mid-chunk, refused before Ray."""
from launcher.config.schema.choices import InferenceBackendName, PlacementMode, UpdateMode
from launcher.validate.registry import error, rule


def _in_flight(cfg) -> bool:
    return cfg.inference.update_mode is UpdateMode.in_flight


@rule("INF014")
def in_flight_needs_the_hf_engine(cfg, plan):
    """Only the hf engine pauses a chunk between its decode steps for an update."""
    if _in_flight(cfg) and cfg.inference.backend is InferenceBackendName.vllm:
        yield error("inference.update_mode", "inference.update_mode=in_flight with inference.backend=vllm",
                    "The vllm backend's engine runs each chunk as one actor call driving vLLM's LLMEngine step by "
                    "step, and lets no weight update in between its steps: an update waits for the chunk. (vLLM's "
                    "AsyncLLM has pause_generation(mode='keep'), which keeps requests and their cache across an "
                    "update: launcher/vllm_release.py says in which releases; this backend does not use it yet.)",
                    "Use inference.update_mode=between_chunks with vLLM, or inference.backend=hf.")


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
    hooks would also record the evaluation's forwards."""
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
