"""`algorithm:` section: GRPO/DAPO, the batch chain and sampling."""
from dataclasses import dataclass, field
from typing import Optional

from launcher.config.schema.choices import AlgorithmName, LossAgg, OffPolicyMode


@dataclass
class DynamicSamplingConfig:
    enabled: bool = False
    """DAPO: drop groups whose samples all got the same reward (zero advantage) and refill."""
    max_regenerations: int = 3
    """Extra generation rounds per step to refill dropped groups. When they run out the step
    trains on the groups it kept, fewer than asked (said on the console and in metrics.jsonl:
    groups_kept of groups_asked, rounds); with none kept it trains nothing (no update, no sync)."""
    max_empty_steps: int = 3
    """Consecutive steps that keep no group (every group's rewards identical: nothing to learn)
    after which the run ends (exit 3) with the reward's pass rate and what to change; 0 = never
    end it. The async loop ends after the groups of this many steps (each with its
    regeneration rounds) in a row arrived without one it could keep."""


@dataclass
class OverlongConfig:
    buffer_len: int = 0
    """DAPO soft overlong penalty: responses longer than max_response_len - buffer_len are
    penalised linearly; 0 = off. Must be < max_response_len."""
    penalty: float = 1.0
    """Penalty at max_response_len (reward minus up to this)."""
    expected_response_len: Optional[int] = None
    """Mean response length you observe (tokens); null = 0.6 x max_response_len. The validator
    warns when the penalty starts below it, i.e. when most responses would be penalised."""


@dataclass
class TokenCorrectionConfig:
    mode: OffPolicyMode = OffPolicyMode.truncate
    """Per-token weight w_t = pi_old(t) / pi_rollout(t): off | truncate | mask | reject
    (OffPolicyMode). The default, truncate at upper 2.0, is the token TIS every run had
    before this block existed (the former constant grpo.IS_WEIGHT_CAP)."""
    lower: Optional[float] = None
    """Lower bound of w_t (null = 0); < 1 when set."""
    upper: Optional[float] = 2.0
    """Upper bound of w_t (null = none); > 1 when set."""


@dataclass
class SequenceCorrectionConfig:
    mode: OffPolicyMode = OffPolicyMode.off
    """Per-sequence weight, the geometric mean of the response's token ratios,
    w_seq = exp(mean_t(log pi_old(t) - log pi_rollout(t))), multiplying every token of the
    sequence: off | truncate | mask | reject (reject: the geometric sequence mask)."""
    lower: Optional[float] = None
    """Lower bound of w_seq (null = 0); < 1 when set (e.g. 0.999 for a tight geometric mask)."""
    upper: Optional[float] = None
    """Upper bound of w_seq (null = none); > 1 when set (e.g. 1.001)."""


@dataclass
class OffPolicyConfig:
    """Correction for the trainer's policy (the old log-probs) differing from the policy the
    engine sampled with (its rollout log-probs): the engines' lag in async mode and the
    engine/trainer numeric mismatch (kernels, bf16, MoE routing) in both loops. A token's loss
    is weighted by token weight x its sequence's weight; the weights carry no gradient."""

    token: TokenCorrectionConfig = field(default_factory=TokenCorrectionConfig)
    """Token-level importance weight (TIS / IcePop)."""
    sequence: SequenceCorrectionConfig = field(default_factory=SequenceCorrectionConfig)
    """Sequence-level importance weight (geometric mean of the token ratios)."""


@dataclass
class PartialRolloutConfig:
    max_tokens_per_step: int = 0
    """Partial rollouts (Kimi k1.5), sync loop only: each step generates at most this many
    tokens of each sequence; a sequence with no EOS yet and shorter than max_response_len is
    carried to the next step and continued there on the new weights (prompt + its tokens so
    far sent again), its tokens keeping their own behaviour log-probs and policy versions. A
    group is scored and trained once all its samples are finished. 0 = off. Below
    max_response_len (PART001-003). Every step continues every carried sequence, so a group's
    oldest token is at most ceil(max_response_len / this) - 1 versions old when it trains
    (the row's staleness_max): the budget sets the staleness, max_staleness is not read."""


@dataclass
class AlgorithmConfig:
    name: AlgorithmName = AlgorithmName.grpo
    """grpo (symmetric clip, sequence-mean loss) or dapo (clip-higher, token-mean, dynamic sampling)."""
    prompts_per_step: int = 8
    """Prompts per RL step; divisible by mini_batch_prompts."""
    mini_batch_prompts: int = 8
    """Prompts per optimizer step; (mini_batch_prompts x samples_per_prompt) % trainer dp == 0."""
    samples_per_prompt: int = 4
    """Responses per prompt (the GRPO group); >= 2."""
    max_response_len: int = 64
    """Generated tokens per response at most."""
    temperature: float = 1.0
    """Sampling temperature (> 0)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]."""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (ratio >= 1 - clip_low)."""
    clip_high: float = 0.2
    """PPO ratio clip above 1; DAPO raises it (clip-higher, e.g. 0.28); >= clip_low."""
    dual_clip: Optional[float] = None
    """Dual-clip constant c > 1 bounding the loss of negative-advantage tokens; null = off."""
    loss_agg: LossAgg = LossAgg.seq_mean_token_mean
    """Loss aggregation (DAPO: token_mean)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the reference policy; 0 = no reference model."""
    entropy_coef: float = 0.0
    """Entropy bonus weight."""
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    """DAPO dynamic sampling."""
    overlong: OverlongConfig = field(default_factory=OverlongConfig)
    """DAPO overlong soft penalty."""
    off_policy: OffPolicyConfig = field(default_factory=OffPolicyConfig)
    """Importance weights between the trainer's old and the engine's rollout log-probs."""
    routing_replay: bool = False
    """Rollout routing replay (R3): the engines return, per token and MoE layer, the top-k
    expert ids their router chose, and the trainer routes by them (gate weights from its own
    router logits over those experts) in its log-prob and training forwards. glm5_next MoE
    models, the hf engine, the hf trainer or the Megatron trainer without TP/EP (ROUTE001-003)."""
    routing_agreement: bool = False
    """The engines return their routes and every step reports routing_agreement (the share of
    token x MoE-layer pairs whose trainer expert set equals the engine's) without replaying
    them; routing_replay turns it on too."""
    indexer_replay: bool = False
    """DSA top-k replay: the engines return, per token and DSA layer with its own indexer, the
    k-pools (index_topk / index_kpool of them; tokens when index_kpool is 1) their indexer
    selected, and the trainer's indexer attends over those instead of its own top-k in its
    log-prob and training forwards. Selection only matters for sequences longer than
    index_topk (shorter ones see every key). Models with DSA layers, the hf engine, the hf or
    Megatron trainer (ROUTE005-008); about 2.8 KB per token for GLM-5.3-Flash (plan.routes)."""
    indexer_agreement: bool = False
    """The engines return their indexer top-k and every step reports indexer_agreement (the
    share of token x indexer-layer pairs whose trainer pool set equals the engine's) without
    replaying it; indexer_replay turns it on too."""
    max_staleness: int = 0
    """Async: samples older than this many policy versions are never trained on; >= 1 for async.
    The sync loop does not read it (with partial_rollout the budget bounds the age)."""
    partial_rollout: PartialRolloutConfig = field(default_factory=PartialRolloutConfig)
    """Carry unfinished sequences to the next step instead of waiting for the longest."""
