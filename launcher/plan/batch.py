"""The batch chain: prompts -> sequences -> mini-batches -> per-GPU -> micro-batches -> tokens.

Sequence lengths are the worst case (max prompt + max response): the planner sizes
memory and timeouts for the longest step the config allows, not the average one.
"""
from dataclasses import dataclass

from launcher.config.schema.root import LauncherConfig
from launcher.plan._origin import Origins


@dataclass
class BatchPlan:
    prompts_per_step: int
    samples_per_prompt: int
    sequences_per_step: int
    mini_batches_per_step: int | None
    sequences_per_mini_batch: int
    sequences_per_gpu_per_mini_batch: float | None
    sequences_per_gpu_per_step: float | None
    max_seq_len: int
    sequences_per_microbatch: int
    micro_batches_per_mini_batch: int | None
    tokens_per_step: int


def _ratio(a: int, b: int | None) -> float | None:
    if not b:
        return None
    return a // b if a % b == 0 else a / b


def plan_batch(cfg: LauncherConfig, dp: int | None, log: Origins) -> BatchPlan:
    alg = cfg.algorithm
    seqs = alg.prompts_per_step * alg.samples_per_prompt
    log.add("batch.sequences_per_step", seqs, f"prompts {alg.prompts_per_step} x samples {alg.samples_per_prompt}")
    mini_seqs = alg.mini_batch_prompts * alg.samples_per_prompt
    minis = _ratio(alg.prompts_per_step, alg.mini_batch_prompts)
    per_gpu_mini = _ratio(mini_seqs, dp)
    log.add("batch.sequences_per_gpu_per_mini_batch", per_gpu_mini, f"{mini_seqs} sequences per mini-batch / dp {dp}")
    max_len = cfg.data.max_prompt_len + alg.max_response_len
    per_micro = max(cfg.trainer.max_tokens_per_microbatch // max_len, 1)
    log.add("batch.sequences_per_microbatch", per_micro,
            f"{cfg.trainer.max_tokens_per_microbatch} tokens per micro-batch / {max_len}-token sequences")
    micro = -(-int(per_gpu_mini) // per_micro) if isinstance(per_gpu_mini, int) else None
    return BatchPlan(
        prompts_per_step=alg.prompts_per_step, samples_per_prompt=alg.samples_per_prompt,
        sequences_per_step=seqs, mini_batches_per_step=minis if isinstance(minis, int) else None,
        sequences_per_mini_batch=mini_seqs, sequences_per_gpu_per_mini_batch=per_gpu_mini,
        sequences_per_gpu_per_step=_ratio(seqs, dp), max_seq_len=max_len,
        sequences_per_microbatch=per_micro, micro_batches_per_mini_batch=micro,
        tokens_per_step=seqs * max_len,
    )
