"""Re-plan the batch for the cluster at hand while keeping chosen quantities fixed.

`plan --keep sequences_per_step`: when nodes are lost (3 -> 2 B300 nodes), keep the
global batch and find prompts / mini-batch / samples that divide over the new dp, and
resize colocated engines to the GPUs left. The search prefers the user's own values:
samples_per_prompt first, then mini_batch_prompts, then prompts_per_step.
"""
KEEPABLE = ("sequences_per_step",)


def _candidates(a, target: int, dp: int):
    for samples in sorted(range(2, 65), key=lambda s: (s != a.samples_per_prompt, abs(s - a.samples_per_prompt))):
        if target % samples:
            continue
        prompts = target // samples
        for mini in sorted((m for m in range(1, prompts + 1) if prompts % m == 0),
                           key=lambda m: (m != a.mini_batch_prompts, abs(m - a.mini_batch_prompts))):
            if (mini * samples) % dp == 0:
                yield [f"algorithm.samples_per_prompt={samples}", f"algorithm.prompts_per_step={prompts}",
                       f"algorithm.mini_batch_prompts={mini}"]
                break


def replan_keeping(composed, keep: list[str], plan_and_check):
    """Return (composed, findings, plan) for the adjusted config; raises ConfigError on unknown keeps."""
    from launcher.config.compose import compose
    from launcher.config.schema.choices import PlacementMode
    from launcher.errors import ConfigError, Finding

    unknown = [k for k in keep if k not in KEEPABLE]
    if unknown:
        raise ConfigError([Finding("CFG006", "error", "--keep", f"cannot keep {unknown}",
                                   "Only these quantities are re-planned.", f"Use --keep with one of {list(KEEPABLE)}.")])
    findings, plan = plan_and_check(composed)
    cfg, extra = composed.config, []
    if cfg.placement.mode is PlacementMode.colocated and cfg.inference.tp:
        extra.append(f"inference.engines={plan.mesh.trainer_gpus // cfg.inference.tp}")
    if plan.mesh.dp:
        extra += next(_candidates(cfg.algorithm, plan.batch.sequences_per_step, plan.mesh.dp), [])
    adjusted = compose(composed.overrides + extra)
    findings, plan = plan_and_check(adjusted)
    plan.origins["replan"] = f"replan kept sequences_per_step={plan.batch.sequences_per_step} with {extra}"
    return adjusted, findings, plan
