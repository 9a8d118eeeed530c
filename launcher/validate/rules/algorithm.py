"""Algorithm, batch-chain and run-length rules."""
from launcher.config.schema.choices import PlacementMode
from launcher.validate.registry import error, rule, warning

DEFAULT_MEAN_RESPONSE_SHARE = 0.6  # a DAPO run capped at 4096 averaged ~2440 tokens


@rule("BATCH001")
def mini_batch_divides_dp(cfg, plan):
    """(mini_batch_prompts x samples_per_prompt) % dp == 0."""
    a, dp = cfg.algorithm, plan.mesh.dp
    seqs = a.mini_batch_prompts * a.samples_per_prompt
    if dp and seqs % dp:
        options = [s for s in range(2, 33) if (a.mini_batch_prompts * s) % dp == 0][:4]
        yield error("algorithm.samples_per_prompt",
                    f"mini_batch_prompts {a.mini_batch_prompts} x samples_per_prompt {a.samples_per_prompt} = {seqs} "
                    f"sequences do not divide over dp {dp}",
                    "Each data-parallel rank must get the same number of sequences per optimizer step.",
                    f"Use samples_per_prompt in {options} or a mini_batch_prompts that makes the product a multiple of {dp}.")


@rule("BATCH002")
def prompts_divide_mini(cfg, plan):
    """prompts_per_step % mini_batch_prompts == 0."""
    a = cfg.algorithm
    if a.mini_batch_prompts < 1 or a.prompts_per_step % a.mini_batch_prompts:
        yield error("algorithm.mini_batch_prompts",
                    f"prompts_per_step {a.prompts_per_step} is not a multiple of mini_batch_prompts {a.mini_batch_prompts}",
                    "A step is split into whole mini-batches (optimizer steps).",
                    "Pick mini_batch_prompts among the divisors of prompts_per_step.")


@rule("BATCH003")
def group_size(cfg, plan):
    """GRPO/DAPO need samples_per_prompt >= 2."""
    n = cfg.algorithm.samples_per_prompt
    if n < 2:
        yield error("algorithm.samples_per_prompt", f"algorithm.samples_per_prompt={n}",
                    "Group-normalised advantages compare samples of the same prompt; one sample has zero advantage.",
                    "Use samples_per_prompt >= 2 (typically 8-16).")


@rule("ALGO001")
def clip_order(cfg, plan):
    """clip_high >= clip_low >= 0."""
    a = cfg.algorithm
    if a.clip_low < 0 or a.clip_high < a.clip_low:
        yield error("algorithm.clip_high", f"clip_low={a.clip_low}, clip_high={a.clip_high}",
                    "The PPO trust region is [1 - clip_low, 1 + clip_high]; DAPO's clip-higher only raises the top.",
                    "Use 0 <= clip_low <= clip_high (DAPO: 0.2 / 0.28).")


@rule("ALGO002")
def overlong_buffer(cfg, plan):
    """overlong.buffer_len < max_response_len."""
    a = cfg.algorithm
    if a.overlong.buffer_len >= a.max_response_len or a.overlong.buffer_len < 0:
        yield error("algorithm.overlong.buffer_len",
                    f"overlong.buffer_len={a.overlong.buffer_len} with max_response_len={a.max_response_len}",
                    "The penalty ramps over the last buffer_len tokens before the cap.",
                    f"Use 0 <= buffer_len < {a.max_response_len} (e.g. a quarter of it).")


@rule("ALGO003")
def overlong_start(cfg, plan):
    """The overlong penalty starts above the expected mean response."""
    a = cfg.algorithm
    ol = a.overlong
    if not 0 < ol.buffer_len < a.max_response_len:
        return
    start = a.max_response_len - ol.buffer_len
    mean = ol.expected_response_len or int(DEFAULT_MEAN_RESPONSE_SHARE * a.max_response_len)
    if start < mean:
        yield warning("algorithm.overlong.buffer_len",
                      f"the overlong penalty starts at {start} tokens, below the expected mean response of {mean}",
                      "Most responses get penalised every step (cap 4096, buffer 2048, mean 2440 did exactly that).",
                      f"Set algorithm.overlong.buffer_len <= {a.max_response_len - mean}.")


@rule("ALGO004")
def async_staleness(cfg, plan):
    """Async mode needs max_staleness >= 1."""
    if cfg.placement.mode is PlacementMode["async"] and cfg.algorithm.max_staleness < 1:
        yield error("algorithm.max_staleness",
                    f"algorithm.max_staleness={cfg.algorithm.max_staleness} with placement.mode=async",
                    "Generation runs ahead of training; 0 would discard every sample.",
                    "Set algorithm.max_staleness >= 1 (GLM-5.3-Flash async recipe: 4).")


@rule("ALGO005")
def sampling_ranges(cfg, plan):
    """temperature > 0, top_p in (0, 1], dual_clip > 1."""
    a = cfg.algorithm
    if a.temperature <= 0:
        yield error("algorithm.temperature", f"algorithm.temperature={a.temperature}",
                    "RL needs sampled, not greedy, responses; logprobs are taken at this temperature.",
                    "Use a temperature > 0 (typically 1.0).")
    if not 0 < a.top_p <= 1:
        yield error("algorithm.top_p", f"algorithm.top_p={a.top_p}", "top_p is a probability mass.",
                    "Use 0 < top_p <= 1.")
    if a.dual_clip is not None and a.dual_clip <= 1:
        yield error("algorithm.dual_clip", f"algorithm.dual_clip={a.dual_clip}",
                    "Dual clip bounds negative-advantage ratios at c > 1.", "Use dual_clip > 1 (e.g. 3.0) or null.")


@rule("ALGO006")
def run_lengths(cfg, plan):
    """steps >= 1, checkpoint.keep >= 1, every_steps >= 0."""
    if cfg.run.steps < 1:
        yield error("run.steps", f"run.steps={cfg.run.steps}", "A run needs at least one step.",
                    "Set run.steps >= 1.")
    if cfg.checkpoint.keep < 1:
        yield error("checkpoint.keep", f"checkpoint.keep={cfg.checkpoint.keep}",
                    "At least the last checkpoint is kept so a run can resume.", "Set checkpoint.keep >= 1.")
    if cfg.checkpoint.every_steps < 0:
        yield error("checkpoint.every_steps", f"checkpoint.every_steps={cfg.checkpoint.every_steps}",
                    "It is a step interval; 0 means only the final checkpoint.", "Set checkpoint.every_steps >= 0.")


@rule("ALGO007")
def off_policy_bounds(cfg, plan):
    """algorithm.off_policy.{token,sequence}: 0 <= lower < 1 < upper; truncate and mask need an upper bound, reject a bound."""
    for level in ("token", "sequence"):
        b = getattr(cfg.algorithm.off_policy, level)
        mode = getattr(b.mode, "value", b.mode)
        if mode == "off":
            continue
        key = f"algorithm.off_policy.{level}"
        shown = f"{key}.mode={mode}, lower={b.lower}, upper={b.upper}"
        if b.lower is not None and not 0 <= b.lower < 1:
            yield error(f"{key}.lower", shown,
                        "An on-policy token or sequence has ratio 1: a lower bound at or above 1 truncates or drops "
                        "every sample that is not less likely under the trainer, and a ratio is never negative.",
                        f"Set {key}.lower in [0, 1) (e.g. 0.5 for a token mask, 0.999 for a geometric sequence "
                        "mask) or null.")
        if b.upper is not None and b.upper <= 1:
            yield error(f"{key}.upper", shown,
                        "An on-policy token or sequence has ratio 1: an upper bound at or below 1 truncates or drops "
                        "every sample that is not less likely under the engine.",
                        f"Set {key}.upper > 1 (token TIS: 2.0; a geometric sequence mask: 1.001) or null.")
        if mode in ("truncate", "mask") and b.upper is None:
            yield error(f"{key}.upper", shown,
                        f"`{mode}` without an upper bound leaves the importance weight unbounded above: one token "
                        "the engine found unlikely can carry the whole gradient (its variance is unbounded).",
                        f"Set {key}.upper (token TIS: 2.0), or {key}.mode=off.")
        if mode == "reject" and b.lower is None and b.upper is None:
            yield error(key, shown, "`reject` without bounds rejects nothing and weights nothing: it does nothing.",
                        f"Set {key}.lower and/or {key}.upper (e.g. 0.999 / 1.001), or {key}.mode=off.")
