"""The plan as readable tables for `python -m launcher plan`."""
from launcher.secrets import mask_secrets


def _table(title: str, rows: list[tuple[str, object]]) -> str:
    width = max(len(k) for k, _ in rows)
    body = "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)
    return f"{title}\n{body}\n"


def _gib(x: float) -> str:
    return f"{x:,.1f} GiB"


def plan_tables(plan) -> str:
    m, b, mem, s, t = plan.mesh, plan.batch, plan.memory, plan.sync, plan.timing
    tr, inf = mem.trainer, mem.inference
    parts = [
        _table("# parameters", [("total", f"{plan.params.total:,}"), ("active per token", f"{plan.params.active:,}"),
                                ("LoRA adapter", f"{plan.lora.params_total:,} (rank {plan.lora.rank}, experts "
                                                 f"{plan.lora.expert_rank})")]),
        _table("# mesh", [("trainer GPUs", m.trainer_gpus), ("tp / pp / cp", f"{m.tp} / {m.pp} / {m.cp}"),
                          ("ep / etp", f"{m.ep} / {m.etp}"), ("dp / edp", f"{m.dp} / {m.edp}"),
                          ("experts per GPU", m.experts_per_gpu), ("padded vocab", m.padded_vocab),
                          ("inference GPUs", m.inference_gpus)]),
        _table("# placement", [("mode", plan.placement.mode), ("trainer nodes", plan.placement.trainer_nodes),
                               ("inference nodes", plan.placement.inference_nodes),
                               ("engines", [f"n{e[0].node}:g{e[0].gpu}-g{e[-1].gpu}" for e in plan.placement.engine_slots])]),
        _table("# batch", [("sequences per step", b.sequences_per_step), ("mini-batches per step", b.mini_batches_per_step),
                           ("sequences per GPU per mini-batch", b.sequences_per_gpu_per_mini_batch),
                           ("sequences per GPU per step", b.sequences_per_gpu_per_step),
                           ("max sequence length", b.max_seq_len),
                           ("micro-batches per mini-batch", b.micro_batches_per_mini_batch),
                           ("tokens per step (max)", f"{b.tokens_per_step:,}")]),
        _table("# memory per GPU (trainer)", [("weights", _gib(tr.weights_gib)), ("grads", _gib(tr.grads_gib)),
                                              ("optimizer", _gib(tr.optimizer_gib)), ("LoRA", _gib(tr.lora_gib)),
                                              ("activations", _gib(tr.activations_gib)), ("runtime", _gib(tr.runtime_gib)),
                                              ("total", _gib(tr.total_gib))]),
        _table("# memory per GPU (inference)", [("weights", _gib(inf.weights_gib)), ("cache", _gib(inf.cache_gib)),
                                                ("KDA state per seq", f"{inf.kda_state_mib_per_seq:.1f} MiB"),
                                                ("DSA cache per token", f"{inf.dsa_cache_kib_per_token:.1f} KiB"),
                                                ("total", _gib(inf.total_gib)), ("budget", _gib(inf.budget_gib)),
                                                ("max-length seqs in budget", inf.max_len_sequences_in_budget)]),
    ]
    if mem.colocated:
        ph = mem.colocated
        parts.append(_table("# colocated phases", [
            ("start-up: engines asleep, trainer built", _gib(ph.startup_gib)),
            ("first sync: + engine weights, bucket, temporaries", _gib(ph.first_sync_gib)),
            ("generation", _gib(ph.generation_gib)), ("training", _gib(ph.training_gib)),
            ("peak of a step", _gib(ph.peak_gib)), ("engine sleep level", mem.sleep_level)]))
    parts.append(_table("# host memory per node", [("sleeping engine weights", _gib(mem.host.sleeping_engine_weights_gib)),
                                                   ("offloaded trainer", _gib(mem.host.offloaded_trainer_gib)),
                                                   ("optimizer offload", _gib(mem.host.optimizer_offload_gib)),
                                                   ("processes", _gib(mem.host.processes_gib)),
                                                   ("total", _gib(mem.host.total_per_node_gib))]))
    parts.append(_table("# weight sync and timing", [
        ("sync", f"{s.kind}, {s.gib_per_engine:,.2f} GiB per engine over {s.link}, ~{s.seconds:.1f} s"),
        ("export on disk", f"model {s.export_model_bytes / 2**30:,.2f} GiB" + (
            f", --adapter {s.export_adapter_bytes / 2**30:,.3f} GiB" if s.export_adapter_bytes else "")),
        ("generation phase", f"~{t.generation_round_s:,.1f} s a round" + (
            f", up to ~{t.generation_s:,.0f} s over {t.generation_rounds} rounds (dynamic sampling)"
            if t.generation_rounds > 1 else "")), ("log-prob pass", f"~{t.logprob_pass_s:,.0f} s"),
        *([("colocated swap per step", f"~{t.swap_s:,.1f} s")] if t.swap_s else []),
        ("rollout per step", f"~{t.rollout_s:,.1f} s (a round + swap)" + (
            f", up to ~{t.generation_s + t.swap_s:,.0f} s" if t.generation_rounds > 1 else "")),
        *([("rollout canary per check", f"~{t.canary_s:,.1f} s (after each wake or update)")] if t.canary_s else []),
        ("longest collective wait", f"~{t.longest_wait_s:,.0f} s ({t.longest_wait_phase})"),
        ("recommended nccl_timeout_s", t.recommended_nccl_timeout_s)]))
    if plan.routes.on:
        r = plan.routes
        parts.append(_table("# MoE routes and indexer pools (routing / indexer replay, agreement)", [
            ("bytes per token", f"{r.bytes_per_token:,} B: routes {r.route_bytes_per_token:,} B (MoE layers x top-k x "
                                f"2 B), indexer pools {r.indexer_bytes_per_token:,} B (indexer layers x index_topk / "
                                "index_kpool x 2 B)"),
            ("per step (max tokens)", f"{r.gib_per_step:,.3f} GiB for {r.tokens_per_step:,} tokens"),
            ("held at once", f"{r.steps_held} step(s): driver {r.driver_gib:,.3f} GiB, object store "
                             f"{r.object_store_gib:,.3f} GiB of ~{r.object_store_capacity_gib:,.1f} GiB")]))
    env = mask_secrets(plan.env)
    parts.append(_table("# worker environment", list(env.items()) or [("(none)", "")]))
    parts.append(_table("# derived values and their origin", [(k, v) for k, v in plan.origins.items()]))
    return "\n".join(parts)
