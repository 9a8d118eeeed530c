"""vLLM engine arguments, derived from the config and the plan (pure Python, no vllm import).

Every number an engine starts with comes from the plan or the config, so what `plan`
printed is what runs: max_num_seqs, max_model_len, the memory budget, TP/EP, LoRA rank and
targets, sleep mode. Kept free of vllm so it is unit-tested in the project's main venv.
"""
from launcher.config.schema.choices import PlacementMode, WeightsDtype
from launcher.config.schema.root import LauncherConfig
from launcher.plan import Plan
from launcher.plan.lora import VLLM_LORA_RANKS
from launcher.plan.sync import SyncKind
from launcher.vllm_release import VllmRelease
from launcher.weight_sync.transports import transport_for
from launcher.weight_sync.transports.vllm_engine import VllmTransfer
from launcher.workers.vllm.glm_config import fill_glm5_next_fields

# The smallest KV cache a CPU engine gets: vLLM needs room for at least one full block
# per sequence, and the tiny recipes' planned cache is a few hundred KiB.
_MIN_CPU_CACHE_BYTES = 32 << 20
OPTIONAL_ENGINE_ARGS = ("language_model_only",)
"""Engine arguments passed only where the installed vLLM's EngineArgs has the field
(language_model_only: vLLM >= 0.11; 0.32 has it in engine/arg_utils.py)."""
WORKER_EXTENSION = "launcher.workers.vllm.worker.WeightSyncExtension"


def vllm_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts that holds a rank-`rank` adapter."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"trainer.lora.rank={rank} exceeds vLLM's largest max_lora_rank {VLLM_LORA_RANKS[-1]}")


def returns_routes(cfg: LauncherConfig) -> bool:
    """The engine returns its MoE routes (routes.py) for the trainer's replay or agreement."""
    return bool(cfg.algorithm.routing_replay or cfg.algorithm.routing_agreement)


def routes_env(cfg: LauncherConfig, release: VllmRelease) -> dict[str, str]:
    """Environment a route-returning engine needs before `import vllm`: the model runner that
    captures routes in `release`. 0.32 captures them in Model Runner V2 only (config/vllm.py
    `_verify_aux_output_compatibility`), and left to choose it falls back to V1 (no Triton, a
    feature V2 lacks: a logged warning) and then refuses the capture; forced, the start fails
    with V2's own reason instead. 0.26 captures them in V1 (gpu_model_runner's routed experts
    capturer) and lists the capture as unsupported by V2, so V1 is asked for."""
    if not returns_routes(cfg):
        return {}
    return {"VLLM_USE_V2_MODEL_RUNNER": "1" if release.routes_v2_runner else "0"}


def engine_kwargs(cfg: LauncherConfig, plan: Plan, model_path: str, *, on_cpu: bool, seed: int) -> dict:
    """Keyword arguments for `vllm.LLM(...)` for one engine.

    On a CPU, vLLM reads gpu_memory_utilization as a share of the whole host's RAM, so
    the planned cache size is passed in bytes instead; sleep mode and the CUDA-IPC/NCCL
    weight transfers do not exist there (weights arrive in buckets, worker.py).
    Routes (algorithm.routing_replay / routing_agreement) turn on vLLM's route capture and
    the prefix caching it requires (config/vllm.py `_verify_aux_output_compatibility`).
    """
    inf = cfg.inference
    adapter_sync = plan.sync.kind is SyncKind.adapter
    colocated = cfg.placement.mode is PlacementMode.colocated
    kwargs = dict(
        model=model_path,
        # Prompts arrive as token ids from the driver's tokenizer; engines never tokenize.
        skip_tokenizer_init=True,
        dtype=cfg.model.dtype.value,
        kv_cache_dtype=inf.kv_cache_dtype.value,
        tensor_parallel_size=inf.tp,
        enable_expert_parallel=inf.ep > 1,
        max_num_seqs=inf.max_num_seqs,
        max_model_len=inf.max_model_len,
        seed=seed,
        # Tempered log-probs of the sampled tokens: what the trainer recomputes (see sampling.py).
        logprobs_mode="processed_logprobs",
        worker_extension_cls=WORKER_EXTENSION,
    )
    if cfg.model.arch.model_type == "glm5_next":
        # Fields vLLM's Glm5Next reads and transformers' config lacks (glm_config.py).
        kwargs["hf_overrides"] = fill_glm5_next_fields
    if cfg.model.language_model_only:
        # Without it vLLM builds Glm5Next's multimodal processor, which refuses to start with
        # skip_tokenizer_init (renderers/base.py); text-only models ignore it.
        kwargs["language_model_only"] = True
    if inf.weights_dtype is WeightsDtype.fp8:
        # vLLM's online block FP8: each layer quantized as it loads, at start-up and in every
        # reload (a weight update), so the sync stays BF16 (plan/fp8.py).
        kwargs["quantization"] = "fp8_per_block"
    if not plan.startup.engine_reads_checkpoint:
        # Random init, or a merged/full sync that re-sends every weight: the trainer pushes
        # its weights before the first generation, so reading the checkpoint is wasted.
        kwargs["load_format"] = "dummy"
    if on_cpu:
        planned = int(plan.memory.inference.cache_gib * 2**30)
        kwargs.update(kv_cache_memory_bytes=max(planned, _MIN_CPU_CACHE_BYTES), enforce_eager=True)
    else:
        kwargs.update(gpu_memory_utilization=inf.gpu_memory_utilization,
                      enable_sleep_mode=colocated and plan.memory.sleep_level > 0)
        via = transport_for(plan.sync.transport)  # vllm_ipc / vllm_nccl for merged or full sync (plan/sync.py)
        if isinstance(via, VllmTransfer):
            kwargs["weight_transfer_config"] = {"backend": via.backend}
    if inf.tp > 1 and not on_cpu:
        # One worker per GPU of the engine, placed by vLLM's Ray executor (ray_executor_env).
        kwargs["distributed_executor_backend"] = "ray"
    if returns_routes(cfg):
        kwargs.update(enable_return_routed_experts=True, enable_prefix_caching=True)
    if plan.loop.in_flight_updates:
        # Async scheduling keeps a batch executing between two engine steps; an update at that
        # boundary would rewrite weights under it and label its tokens with the new version.
        kwargs["async_scheduling"] = False
    if adapter_sync:
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=vllm_lora_rank(cfg.trainer.lora.rank))
        if inf.lora_targets:
            kwargs["lora_target_modules"] = list(inf.lora_targets)
    return kwargs


def supported_kwargs(kwargs: dict, engine_arg_names) -> tuple[dict, list[str]]:
    """`kwargs` less the optional ones the installed vLLM's EngineArgs lacks, and their names.

    Only keys in OPTIONAL_ENGINE_ARGS are dropped: a core argument vLLM does not know must
    still fail at LLM(...) rather than be silently ignored.
    """
    names = set(engine_arg_names)
    dropped = [k for k in OPTIONAL_ENGINE_ARGS if k in kwargs and k not in names]
    return {k: v for k, v in kwargs.items() if k not in dropped}, dropped


def ray_executor_env(cfg: LauncherConfig, plan: Plan, engine_index: int) -> dict[str, str]:
    """Where vLLM's Ray executor puts the TP workers of engine `engine_index` (GPUs, tp > 1).

    The orchestrator makes one placement group per node with bundle i = GPU i, and the
    engine actor runs inside it, so vLLM finds that group; these variables pin its workers
    to the engine's own GPUs, each taking the engine's share of the GPU (half when a
    trainer rank is colocated on it).
    """
    if cfg.inference.tp == 1:
        return {}
    gpus = [slot.gpu for slot in plan.placement.engine_slots[engine_index]]
    return {"VLLM_RAY_BUNDLE_INDICES": ",".join(map(str, gpus)),
            "VLLM_RAY_PER_WORKER_GPUS": str(plan.placement.gpu_fraction)}
