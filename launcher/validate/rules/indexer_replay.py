"""DSA top-k replay and agreement (algorithm.indexer_replay, algorithm.indexer_agreement):
the model has indexers to replay, the engine can return their pools, and the pool indices
fit the arrays that carry them. What the arrays cost is ROUTE003's (plan.routes)."""
from launcher.config.schema.choices import InferenceBackendName, TrainerBackendName
from launcher.plan.routes import indexer_layers
from launcher.validate.registry import error, rule, warning

NO_POOL = 65_535
"""launcher/workers/indexer_picks.py NO_POOL (not imported: that module imports torch at load)."""


def indexer_on(cfg) -> str | None:
    """The key that turns the return of indexer pools on, or None."""
    a = cfg.algorithm
    return "algorithm.indexer_replay" if a.indexer_replay else "algorithm.indexer_agreement" if a.indexer_agreement \
        else None


@rule("ROUTE005")
def indexer_replay_needs_an_indexer(cfg, plan):
    """Indexer replay / agreement need DSA layers that run their own (glm5_next) indexer."""
    key = indexer_on(cfg)
    if key is None or indexer_layers(cfg.model.arch, plan.arch):
        return
    yield error(key, f"{key}=true on model {cfg.model.name} (model_type {cfg.model.arch.model_type}), which has no "
                "indexed_attention layer with a full DSA indexer",
                "Replay and agreement are about which k-pools a DSA indexer picks for each query: a model "
                "without one attends to every key (or through linear attention) and has nothing to replay.",
                f"Set {key}=false, or pick a model with DSA layers (model=tiny, model=glm5_3_flash).")


@rule("ROUTE006")
def indexer_replay_needs_the_hf_engine(cfg, plan):
    """Only the hf engine records its indexer's pools (hooks on transformers' glm5_next
    indexer, launcher/workers/hf/indexer_topk.py); vLLM 0.32 returns none."""
    key = indexer_on(cfg)
    if key is None or cfg.inference.backend is not InferenceBackendName.vllm:
        return
    yield error("inference.backend", f"{key}=true with inference.backend=vllm",
                "vLLM 0.32 returns no DSA indexer top-k: its auxiliary outputs are the routed experts only "
                "(vllm/config/aux_output.py AuxOutputConfig has enable_return_routed_experts alone, "
                "CompletionOutput carries routed_experts and no indexer field); its indexer writes its top-k "
                "into a device buffer it does not expose (SGLang's return_indexer_topk has no vLLM counterpart).",
                f"Use inference.backend=hf (its engine records the pools), or set {key}=false.")


@rule("ROUTE007")
def pool_indices_fit_uint16(cfg, plan):
    """Pool indices travel as uint16 with 65,535 meaning no pool: the longest sequence has
    fewer pools than that."""
    key = indexer_on(cfg)
    a = cfg.model.arch
    if key is None or a.index_kpool < 1 or plan.batch.max_seq_len // a.index_kpool <= NO_POOL:
        return
    yield error("model.arch.index_kpool", f"{key}=true with sequences of up to {plan.batch.max_seq_len:,} tokens in "
                f"pools of model.arch.index_kpool={a.index_kpool}: "
                f"{plan.batch.max_seq_len // a.index_kpool:,} pools per sequence",
                f"The engines' pool indices are uint16 arrays with {NO_POOL} reserved for 'no pool' "
                "(launcher/workers/indexer_picks.py), so a sequence may hold at most 65,535 pools.",
                f"Lower data.max_prompt_len or algorithm.max_response_len, or set {key}=false.")


@rule("ROUTE008")
def megatron_indexer_replay_tensor_parallel_unrun(cfg, plan):
    """The Megatron trainer's indexer runs on the TP-gathered stream, so every TP rank gets
    the whole stream's pools: checked on CPU forwards (tests/unit/model/
    test_megatron_indexer_replay_parallel.py: tp2+SP follows random given pools exactly, with
    one rank's logits) and in data-parallel runs, but no GPU run with TP has replayed them: a
    warning, not a refusal."""
    key = indexer_on(cfg)
    if key is None or cfg.trainer.backend is not TrainerBackendName.megatron or cfg.trainer.mesh.tp == 1:
        return
    yield warning("trainer.mesh.tp", f"{key}=true with trainer.backend=megatron, tp={cfg.trainer.mesh.tp}",
                  "Each TP rank replays the whole packed stream's pools on its gathered sequence "
                  "(model/megatron/indexer_slot.py), checked in CPU tests of the forward; no GPU run with TP > 1 "
                  "has used it.",
                  "Check indexer_agreement in metrics.jsonl: it is 1.0 on every step when replay works.")
