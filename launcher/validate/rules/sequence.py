"""Sequence-length rules: engine context, micro-batch budget, DSA index_topk and k-pool."""
from launcher.validate.registry import error, rule


@rule("SEQ001")
def fits_model_len(cfg, plan):
    """prompt + response fits inference.max_model_len."""
    need, have = plan.batch.max_seq_len, cfg.inference.max_model_len
    if need > have:
        yield error("inference.max_model_len",
                    f"data.max_prompt_len {cfg.data.max_prompt_len} + algorithm.max_response_len "
                    f"{cfg.algorithm.max_response_len} = {need} > inference.max_model_len {have}",
                    "The engine truncates or rejects sequences longer than its context.",
                    f"Set inference.max_model_len >= {need} or shorten prompts/responses.")


@rule("SEQ002")
def microbatch_holds_sequence(cfg, plan):
    """max_tokens_per_microbatch holds one full sequence."""
    need, have = plan.batch.max_seq_len, cfg.trainer.max_tokens_per_microbatch
    if have < need:
        yield error("trainer.max_tokens_per_microbatch",
                    f"trainer.max_tokens_per_microbatch={have} < one full sequence of {need} tokens "
                    f"(prompt {cfg.data.max_prompt_len} + response {cfg.algorithm.max_response_len})",
                    "A packed micro-batch cannot split a sequence; the first long response fails the step.",
                    f"Set trainer.max_tokens_per_microbatch >= {need} (and check memory: larger budgets OOM).")


@rule("SEQ003")
def long_sequences_need_kpool(cfg, plan):
    """Sequences longer than index_topk need a k-pool indexer."""
    a = cfg.model.arch
    if plan.arch.has_dsa and a.index_kpool <= 1 and plan.batch.max_seq_len > a.index_topk:
        yield error("model.arch.index_kpool",
                    f"sequences of {plan.batch.max_seq_len} tokens > model.arch.index_topk={a.index_topk} "
                    f"with index_kpool={a.index_kpool}",
                    "Without k-pooling the DSA indexer cannot select over sequences longer than index_topk; "
                    "training raises at the first step.",
                    f"Use a k-pool indexer (index_kpool > 1) or keep prompt + response <= {a.index_topk}.")


@rule("SEQ004")
def topk_divides_kpool(cfg, plan):
    """index_topk divides by index_kpool."""
    a = cfg.model.arch
    if plan.arch.has_dsa and (a.index_kpool < 1 or a.index_topk % a.index_kpool):
        yield error("model.arch.index_kpool",
                    f"model.arch.index_topk={a.index_topk} is not divisible by index_kpool={a.index_kpool}",
                    "The indexer selects index_topk / index_kpool whole pools; HF rejects the config.",
                    "Pick index_kpool among the divisors of index_topk (e.g. 4 or 16).")


@rule("SEQ005")
def within_positions(cfg, plan):
    """max_model_len within max_position_embeddings."""
    a, n = cfg.model.arch, cfg.inference.max_model_len
    if n > a.max_position_embeddings:
        yield error("inference.max_model_len",
                    f"inference.max_model_len={n} > model.arch.max_position_embeddings={a.max_position_embeddings}",
                    "vLLM refuses a context longer than the model's positions.",
                    f"Set inference.max_model_len <= {a.max_position_embeddings}.")
