"""The range of every size, count and length field of the schema, checked at composition.

One table, keyed by the dotted key, read by the composition check (launcher/config/compose.py) and
the property test (tests/unit/test_schema_ranges.py). A value outside its range is a
composition error (CFG007, exit 2) naming the key, the value and the range, for the CLI,
recipes and sweep points alike, so the planner never divides by a zero or negative size.
Integers and physical sizes are also bounded by int32 max (what the kernels and NCCL take),
which catches a mistyped huge value before it overflows the planner's products. Ranges
whose violation an existing validator rule already reports with its own id and advice
carry `checked_by` and are left to that rule (bar the int32 bound).
"""
from dataclasses import dataclass

from launcher.errors import Finding

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Range:
    low: float
    open_low: bool = False
    high: float | None = INT32_MAX
    zero_means: str | None = None
    """What 0 means where 0 is allowed (documented in the field's docstring too)."""
    checked_by: str | None = None
    """The validator rule that reports a value outside the range; composition then checks only
    |value| <= int32 max (a mistyped huge value, which would overflow the planner's products)."""

    def contains(self, value) -> bool:
        above = value > self.low if self.open_low else value >= self.low
        return above and (self.high is None or value <= self.high)

    def describe(self) -> str:
        text = f"{'>' if self.open_low else '>='} {_num(self.low)}"
        if self.high is not None:
            text += f" and <= {_num(self.high)}"
        return text + (f" (0 = {self.zero_means})" if self.zero_means else "")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


POS = Range(1)
"""A size or count: at least one."""
POS_FLOAT = Range(0, open_low=True)
"""A physical size (GiB, TFLOP/s, Gbit/s, seconds): positive, and finite in every product the planner forms."""


def _zero(meaning: str, checked_by: str | None = None) -> Range:
    return Range(0, zero_means=meaning, checked_by=checked_by)


RANGES: dict[str, Range] = {
    "run.seed": Range(0, high=2**32 - 1),
    "run.steps": Range(1, checked_by="ALGO006"),
    "run.eval_every_steps": _zero("never", checked_by="EVAL001"),
    "run.eval_samples": _zero("greedy only"),
    "run.eval_problems": Range(1, checked_by="EVAL001"),
    "run.hang_timeout_s": POS_FLOAT,
    "run.preemption_grace_s": POS_FLOAT,
    "run.rollout_checks.canary.prompts": _zero("no canary"),
    "run.rollout_checks.canary.max_tokens": POS,
    "run.rollout_checks.canary.max_gap": POS_FLOAT,
    "run.rollout_checks.canary.relative_to_first": _zero("only max_gap"),
    "run.rollout_checks.stop_after_steps": Range(1, checked_by="CHECK001"),
    "data.environment.max_turns": POS,
    "data.environment.max_turn_tokens": POS,
    "data.environment.step_timeout_s": POS_FLOAT,
    "data.environment.workers": POS,
    **{f"run.rollout_checks.{metric}.{level}": Range(0) for metric in (
        "repeat_ngram_frac", "collapse_frac", "truncated_frac", "nonfinite_logprobs", "logprob_abs_diff_mean",
        "rollout_kl") for level in ("warn", "stop")},
    **{f"model.arch.{name}": POS for name in (
        "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "kv_lora_rank", "qk_nope_head_dim", "v_head_dim",
        "index_n_heads", "index_head_dim", "index_topk", "index_kpool", "linear_num_heads", "linear_head_dim",
        "linear_conv_kernel_dim", "hc_mult", "hc_sinkhorn_iters", "max_position_embeddings")},
    "model.arch.head_dim": _zero("unused: MLA (glm5_next's config.json writes 0)"),
    "model.arch.n_routed_experts": _zero("a dense model (no MoE)"),
    "model.arch.num_experts_per_tok": _zero("a dense model (no MoE)"),
    "model.arch.n_shared_experts": _zero("no shared expert"),
    "model.arch.q_lora_rank": _zero("no query down-projection"),
    "model.arch.qk_rope_head_dim": _zero("NoPE (GLM-5.3-Flash)"),
    "cluster.nodes": POS,
    "cluster.gpus_per_node": POS,
    "cluster.gpu.memory_gib": POS_FLOAT,
    "cluster.gpu.bf16_tflops": POS_FLOAT,
    "cluster.gpu.hbm_tbps": POS_FLOAT,
    "cluster.host_memory_gib": POS_FLOAT,
    "cluster.links.intra_node_gbps": POS_FLOAT,
    "cluster.links.inter_node_gbps": POS_FLOAT,
    "cluster.links.storage_gib_per_s": POS_FLOAT,
    "cluster.kubernetes.ttl_seconds_after_finished": _zero("the job's Ray cluster is deleted at once"),
    "placement.trainer_nodes": Range(1, checked_by="PLACE001"),
    "placement.inference_nodes": POS,
    "trainer.mesh.tp": POS,
    "trainer.mesh.pp": POS,
    "trainer.mesh.cp": POS,
    "trainer.mesh.ep": POS,
    "trainer.mesh.etp": POS,
    "trainer.recompute.num_layers": POS,
    "trainer.max_tokens_per_microbatch": POS,
    "trainer.micro_batch_size": POS,
    "trainer.optimizer.grad_clip": _zero("off"),
    "trainer.lora.rank": _zero("full fine-tuning", checked_by="LORA007"),
    "trainer.nccl_timeout_s": POS,
    "inference.engines": POS,
    "inference.tp": POS,
    "inference.ep": POS,
    "inference.gpu_memory_utilization": Range(0, open_low=True, high=1, checked_by="INF004"),
    "inference.max_num_seqs": POS,
    "inference.max_model_len": POS,
    "inference.sleep_level": Range(0, high=2, zero_means="never sleep", checked_by="INF010"),
    "inference.concurrency_per_engine": POS,
    "inference.router.queue_size": POS,
    "inference.router.queue_timeout_s": POS_FLOAT,
    "data.max_prompt_len": POS,
    "data.preflight_rows": _zero("validate reads no rows of the data files"),
    "algorithm.prompts_per_step": POS,
    "algorithm.mini_batch_prompts": Range(1, checked_by="BATCH002"),
    "algorithm.samples_per_prompt": POS,
    "algorithm.max_response_len": POS,
    "algorithm.dynamic_sampling.max_regenerations": _zero("train on fewer groups, never regenerate"),
    "algorithm.dynamic_sampling.max_empty_steps": _zero("never end the run"),
    "algorithm.overlong.buffer_len": _zero("off", checked_by="ALGO002"),
    "algorithm.overlong.expected_response_len": POS,
    "algorithm.max_staleness": _zero("on-policy (sync loop)"),
    "algorithm.partial_rollout.max_tokens_per_step": _zero("off: every sequence finishes in its step"),
    "checkpoint.every_steps": _zero("only at the end", checked_by="ALGO006"),
    "checkpoint.keep": Range(1, checked_by="ALGO006"),
}

NON_EMPTY = {"run.name": "it names the run directory `<output_dir>/<run.name>`"}


def _value(config, key: str):
    node = config
    for part in key.split("."):
        node = getattr(node, part)
    return node


def range_findings(config) -> list[Finding]:
    """CFG007 for every ranged field outside its range (and every empty required name)."""
    findings = []
    for key, rng in RANGES.items():
        value = _value(config, key)
        if value is None or isinstance(value, bool) or rng.contains(value):
            continue
        if rng.checked_by and abs(value) <= INT32_MAX:
            continue
        findings.append(Finding(
            id="CFG007", severity="error", key=key,
            message=f"`{key}`={value!r} is out of range: it must be {rng.describe()}.",
            why="A size, count or length outside its range cannot run (a zero or negative parallel size "
                "would divide the cluster by it).",
            fix=f"Set `{key}` to a value {rng.describe()}.",
        ))
    for key, why in NON_EMPTY.items():
        if not str(_value(config, key)).strip():
            findings.append(Finding(
                id="CFG007", severity="error", key=key, message=f"`{key}` is empty ({_value(config, key)!r}).",
                why=f"It must be a non-empty name: {why}.", fix=f"Set `{key}` to a name, e.g. {key}=my_run."))
    return findings
