"""Memory rules: trainer, engine, colocated phases and host memory against the hardware."""
from launcher.config.schema.choices import TrainerBackendName
from launcher.validate.registry import error, rule, warning


def _fmt(gib: float) -> str:
    return f"{gib:,.1f} GiB"


@rule("MEM001")
def trainer_fits(cfg, plan):
    """The trainer fits on one GPU."""
    tm, cap = plan.memory.trainer, cfg.cluster.gpu.memory_gib
    if not plan.mesh_ok or tm.total_gib <= cap:
        return
    full = not plan.lora.enabled
    why = (f"weights {_fmt(tm.weights_gib)} + grads {_fmt(tm.grads_gib)} + optimizer {_fmt(tm.optimizer_gib)} + "
           f"LoRA {_fmt(tm.lora_gib)} + activations {_fmt(tm.activations_gib)} + runtime {_fmt(tm.runtime_gib)}")
    fix = ("Full fine-tuning needs ~18 B/param; use LoRA (trainer.lora.rank > 0) or more GPUs with a larger "
           "expert grid (e.g. 64 x B200, tp 4, ep 32, etp 2)." if full else
           "Raise ep/tp, enable optimizer.cpu_offload, recompute more, or lower max_tokens_per_microbatch.")
    yield error("trainer.lora.rank" if full else "trainer.mesh.ep",
                f"trainer needs {_fmt(tm.total_gib)} per GPU, {cfg.cluster.gpu.name} has {_fmt(cap)}", why, fix)


@rule("MEM002")
def engine_weights_fit(cfg, plan):
    """Engine weights plus one max-length sequence fit its budget."""
    im = plan.memory.inference
    if im.max_len_sequences_in_budget < 1:
        yield error("inference.gpu_memory_utilization",
                    f"engine weights {_fmt(im.weights_gib)} per GPU leave no room for one {cfg.inference.max_model_len}-token "
                    f"sequence in the {_fmt(im.budget_gib)} budget",
                    "vLLM refuses to start when the cache cannot hold one max_model_len sequence.",
                    "Raise inference.tp, inference.gpu_memory_utilization, or lower max_model_len.")


@rule("MEM003")
def engine_cache_fits(cfg, plan):
    """max_num_seqs sequences of max_model_len fit the engine budget."""
    im, inf = plan.memory.inference, cfg.inference
    if 1 <= im.max_len_sequences_in_budget < inf.max_num_seqs:
        yield warning("inference.max_num_seqs",
                      f"the cache fits {im.max_len_sequences_in_budget} max-length sequences, max_num_seqs={inf.max_num_seqs}",
                      "vLLM will preempt and recompute sequences when long responses fill the cache.",
                      f"Lower inference.max_num_seqs to {im.max_len_sequences_in_budget} or raise tp/utilization.")


@rule("MEM004")
def colocated_peak_fits(cfg, plan):
    """Both colocated phases fit on the GPU."""
    phases, cap = plan.memory.colocated, cfg.cluster.gpu.memory_gib
    if phases is None or phases.peak_gib <= cap:
        return
    yield error("inference.gpu_memory_utilization",
                f"colocated peak {_fmt(phases.peak_gib)} > {_fmt(cap)} (generation {_fmt(phases.generation_gib)}, "
                f"training {_fmt(phases.training_gib)})",
                "Trainer and engines share every GPU; the larger phase must fit with the other side asleep.",
                "Lower inference.gpu_memory_utilization, use sleep_level 1 or 2, or shrink the trainer footprint.")


@rule("MEM008")
def colocated_startup_fits(cfg, plan):
    """The colocated start-up (engines asleep, trainer built) and the first weight sync fit on the GPU."""
    ph, cap, level = plan.memory.colocated, cfg.cluster.gpu.memory_gib, plan.memory.sleep_level
    if ph is None or not plan.mesh_ok or max(ph.startup_gib, ph.first_sync_gib) <= cap:
        return
    weights = ph.first_sync_gib - ph.startup_gib - ph.transfer_bucket_gib - ph.sync_temporaries_gib
    message = (f"colocated start-up needs {_fmt(max(ph.startup_gib, ph.first_sync_gib))} per GPU, "
               f"{cfg.cluster.gpu.name} has {_fmt(cap)}: engines {'awake' if level == 0 else 'asleep'} + trainer "
               f"built {_fmt(ph.startup_gib)}, first weight sync {_fmt(ph.first_sync_gib)} (+ engine weights "
               f"{_fmt(weights)} + transfer bucket {_fmt(ph.transfer_bucket_gib)} + conversion temporaries "
               f"{_fmt(ph.sync_temporaries_gib)})")
    why = ("The engines start and sleep before the trainer builds its weights, grads and optimizer; the first "
           "sync then wakes the engines' weights while the trainer is still whole (it offloads only at the first "
           "step), so both must fit before the steady-state phases (MEM004) begin.")
    if level == 0:
        yield error("inference.sleep_level", message, why,
                    "Leave inference.sleep_level null (or set 1 or 2) so the engines sleep while the trainer builds.")
        return
    yield error("trainer.mesh.ep", message, why,
                "Shrink the trainer's resident state (raise trainer.mesh.ep or tp, trainer.optimizer.cpu_offload "
                "with LoRA) or the engine's weights per GPU (raise inference.tp).")


@rule("MEM005")
def host_fits(cfg, plan):
    """Host memory holds sleeping engines and offloaded state."""
    h, cap = plan.memory.host, cfg.cluster.host_memory_gib
    if h.total_per_node_gib > cap:
        yield error("cluster.host_memory_gib",
                    f"each node needs {_fmt(h.total_per_node_gib)} of host memory, it has {_fmt(cap)} "
                    f"(sleeping engine weights {_fmt(h.sleeping_engine_weights_gib)}, offloaded trainer "
                    f"{_fmt(h.offloaded_trainer_gib)}, optimizer offload {_fmt(h.optimizer_offload_gib)}, processes "
                    f"{_fmt(h.processes_gib)})",
                    "Sleep level 1 and offloading copy GPU state into pinned host memory; running out kills the node.",
                    _host_fix(h, cap))


def _host_fix(h, cap: float) -> str:
    """Only changes that bring a node under its host memory: each alone, else both, else what
    the offloaded trainer state and the processes need (no setting removes them from a colocated node)."""
    parts = {"inference.sleep_level=2": h.sleeping_engine_weights_gib,
             "trainer.optimizer.cpu_offload=false": h.optimizer_offload_gib}
    present = [k for k, gib in parts.items() if gib > 0]
    alone = [k for k in present if h.total_per_node_gib - parts[k] <= cap]
    if alone:
        return f"Set {' or '.join(alone)}."
    rest = h.total_per_node_gib - sum(parts.values())
    if present and rest <= cap:
        return f"Set {' and '.join(present)}."
    return (f"Each node needs {_fmt(rest)} for the offloaded trainer state and the run's processes alone, which no "
            "setting removes from a colocated node: spread the trainer over more nodes (each then holds a smaller "
            f"share), or use nodes with at least {_fmt(rest)} of host memory.")


FULL_FT_BYTES_PER_PARAM = 18  # bf16 weights 2 + fp32 grads 4 + fp32 master and Adam m, v 12


@rule("MEM006")
def full_finetune_fits_cluster(cfg, plan):
    """Full fine-tuning state fits the trainer nodes' GPU and host memory together."""
    if plan.lora.enabled:
        return
    need = plan.params.total * FULL_FT_BYTES_PER_PARAM / 2**40
    nodes = len(plan.placement.trainer_nodes)
    gpus = plan.mesh.trainer_gpus * cfg.cluster.gpu.memory_gib / 1024
    host = nodes * cfg.cluster.host_memory_gib / 1024
    if need > gpus + host:
        yield error("trainer.lora.rank",
                    f"full fine-tuning needs {need:.2f} TiB of weights, grads and optimizer state "
                    f"({plan.params.total / 1e9:.1f} B params x 18 B); {plan.mesh.trainer_gpus} x "
                    f"{cfg.cluster.gpu.name} hold {gpus:.2f} TiB and the hosts {host:.2f} TiB",
                    "Full fine-tuning with Adam keeps ~18 B per parameter somewhere; no sharding removes it.",
                    "Use LoRA (trainer.lora.rank=32 or 64 with targets), or a cluster with more GPUs "
                    "(64 x B200 with tp 4, ep 32, etp 2 fits).")


@rule("MEM007")
def host_optimizer_full_finetune(cfg, plan):
    """Optimizer CPU offload on the megatron trainer only with LoRA."""
    if (cfg.trainer.backend is TrainerBackendName.megatron and cfg.trainer.optimizer.cpu_offload and not plan.lora.enabled
            and plan.arch.is_glm5_next):
        yield error("trainer.optimizer.cpu_offload",
                    "trainer.optimizer.cpu_offload=true with full fine-tuning (trainer.lora.rank=0) on megatron",
                    "megatron-core 0.19.2's host optimizer (HybridDeviceOptimizer) refuses fp32 weights: their "
                    "optimizer shards are views that torch.optim rejects ('can't optimize a non-leaf Tensor'), "
                    "and GLM-5.3-Flash keeps its router, KDA conv/dt_bias/A_log and mHC base/scale in fp32. "
                    "The trainer fails while building its optimizer, after the cluster is up (measured on an H200).",
                    "Set trainer.optimizer.cpu_offload=false (check MEM001: grow ep x etp or the cluster until "
                    "the fp32 masters and Adam states fit), or train LoRA adapters (trainer.lora.rank > 0).")
