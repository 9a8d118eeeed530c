"""MoE routing replay and agreement (algorithm.routing_replay, algorithm.routing_agreement):
the model has routers to replay, and the engine and trainer backends support it."""
from launcher.config.schema.choices import InferenceBackendName, TrainerBackendName
from launcher.validate.registry import error, rule


def _routes_on(cfg) -> str | None:
    """The key that turns route return on, or None."""
    a = cfg.algorithm
    return "algorithm.routing_replay" if a.routing_replay else "algorithm.routing_agreement" if a.routing_agreement else None


@rule("ROUTE001")
def routes_need_a_router(cfg, plan):
    """Routing replay / agreement need a glm5_next MoE model (its sigmoid top-k router)."""
    key = _routes_on(cfg)
    if key is None:
        return
    if not plan.arch.has_moe:
        yield error(key, f"{key}=true on model {cfg.model.name}, which has no routed experts",
                    "Replay and agreement are about which experts a router picks: a dense model has no router.",
                    f"Set {key}=false, or pick a MoE model (model=tiny, model=glm5_3_flash).")
    elif not plan.arch.is_glm5_next:
        yield error(key, f"{key}=true on model_type {cfg.model.arch.model_type}",
                    "The hf trainer replays through glm5_next's router (sigmoid scores, correction bias, "
                    "normalised top-k weights: launcher/workers/hf/routing.py); other routers compute their "
                    "weights differently and are not wired.",
                    f"Set {key}=false, or use a glm5_next model.")


@rule("ROUTE002")
def routes_need_backends(cfg, plan):
    """Routes are returned by the hf engine and replayed by the hf trainer only (for now)."""
    key = _routes_on(cfg)
    if key is None:
        return
    if cfg.inference.backend is InferenceBackendName.vllm:
        yield error("inference.backend", f"{key}=true with inference.backend=vllm",
                    "The vllm engine does not return its routes yet (vLLM's enable_return_routed_experts, "
                    "CompletionOutput.routed_experts, is not wired into it).",
                    f"Use inference.backend=hf, or set {key}=false.")
    if cfg.trainer.backend is TrainerBackendName.megatron:
        yield error("trainer.backend", f"{key}=true with trainer.backend=megatron",
                    "The Megatron trainer's router (model/megatron) cannot replay given expert ids or report "
                    "its agreement yet.",
                    f"Use trainer.backend=hf, or set {key}=false.")
