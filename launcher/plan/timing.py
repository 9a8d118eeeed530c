"""Phase-time estimates and the collective timeout they imply (docs/model.md section 5, item 7).

A trainer rank can sit inside one collective for a whole phase: during generation
(colocated ranks wait for the engines, async ranks for a full batch) and during a
log-prob pass. The NCCL timeout must exceed the longest of these, with margin.
Deliberately pessimistic constants, so the timeout errs long:
- decode step = a measured function of the engine's bandwidth floor (engine weights per GPU /
  HBM bandwidth: one read of every weight per step), per engine; a round runs ceil(sequences per engine /
  concurrency) waves of max_response_len steps (partial rollouts: the step's token budget),
  and DAPO's dynamic sampling may run
  1 + max_regenerations rounds;
- log-prob and training passes run at LOGPROB_MFU / TRAIN_MFU of the bf16 peak on
  2 (forward) or 6 (forward + backward, plus recompute) x active params per token.
"""
import math
from dataclasses import dataclass

from launcher.config.schema.choices import InferenceBackendName
from launcher.config.schema.root import LauncherConfig
from launcher.plan.batch import BatchPlan
from launcher.plan.memory_inference import InferenceMemory
from launcher.plan.params import ParamCounts

VLLM_WEIGHT_READS = 2.5
VLLM_STEP_OVERHEAD_S = 0.003
"""vLLM's decode step = VLLM_WEIGHT_READS x its bandwidth floor + VLLM_STEP_OVERHEAD_S (scheduling,
sampling, log-probs: what dominates a small model). Measured with CUDA graphs on one H200, vLLM
0.26, the Qwen3-30B-A3B 4-layer slice (5.8 GiB, floor 1.30 ms), 64 sequences x 256 tokens a
round in 1.38-1.75 s through the launcher (device/vllm_job_h200.sh, 2026-12-04): 5.4-6.8 ms
a step, generation phase overheads included; the formula gives 6.2 ms."""
HF_FLOOR_MULTIPLE = 6.6
"""The hf engine's, on the same model and batch in the same session: 2.19 s a round (8.6 ms a step)."""
HF_FLA_FLOOR_MULTIPLE = 25.6
"""The hf engine's on a KDA model (fla kernels, eager MoE and mHC): the GLM-5.3-Flash 4-layer
slice (44.3 GiB, floor 9.9 ms) on one H200, 64 x 256 tokens in ~65 s a round (0.25 s a step)."""
LOGPROB_MFU = 0.15
TRAIN_MFU = 0.2
TIMEOUT_MARGIN = 2.0
MIN_TIMEOUT_S = 600


@dataclass
class TimingPlan:
    decode_step_s: float
    generation_round_s: float
    """One round: every sequence of the step generated once."""
    generation_rounds: int
    """Rounds at most: 1 + algorithm.dynamic_sampling.max_regenerations with dynamic sampling on."""
    generation_s: float
    """The phase at its longest (every round full: no group kept), what deadlines and timeouts wait for."""
    logprob_pass_s: float
    train_s: float
    longest_wait_s: float
    longest_wait_phase: str
    recommended_nccl_timeout_s: int
    swap_s: float
    """Colocated, per step: the trainer off the GPU and back, the engines woken and put to sleep (plan/swap.py)."""
    rollout_s: float
    """A step's rollout as the sync loop's metrics time it (`rollout_s`): one generation round and the swap.
    With dynamic sampling's regenerations a step's may reach generation_s + swap_s."""
    canary_s: float
    """One rollout canary check (run.rollout_checks.canary; driver/loop/canary.py): its prompts' decode steps
    on each engine, then the trainer's forward over the engines' canary sequences. 0 with the canary off."""


def decode_step_s(cfg: LauncherConfig, floor_s: float, has_kda: bool) -> float:
    """One decode step of the configured engine, from its bandwidth floor (measured: see the constants)."""
    if cfg.inference.backend is InferenceBackendName.vllm:
        return VLLM_WEIGHT_READS * floor_s + VLLM_STEP_OVERHEAD_S
    return (HF_FLA_FLOOR_MULTIPLE if has_kda else HF_FLOOR_MULTIPLE) * floor_s


def generation_rounds(cfg: LauncherConfig) -> int:
    ds = cfg.algorithm.dynamic_sampling
    return 1 + ds.max_regenerations if ds.enabled else 1


def decode_steps_per_round(cfg: LauncherConfig) -> int:
    """A round's decode steps: max_response_len, or with partial rollouts the step's token
    budget per sequence (algorithm.partial_rollout.max_tokens_per_step), past which the
    longest sequences are carried to the next step instead of waited for."""
    return cfg.algorithm.partial_rollout.max_tokens_per_step or cfg.algorithm.max_response_len


def _generation_round_s(cfg: LauncherConfig, batch: BatchPlan, inf_mem: InferenceMemory,
                        has_kda: bool) -> tuple[float, float]:
    """(decode step, one round) in seconds."""
    inf = cfg.inference
    floor_s = inf_mem.weights_gib * 2**30 / (cfg.cluster.gpu.hbm_tbps * 1e12)
    step = decode_step_s(cfg, floor_s, has_kda)
    per_engine = math.ceil(batch.sequences_per_step / max(inf.engines, 1))
    waves = math.ceil(per_engine / max(min(inf.concurrency_per_engine, inf.max_num_seqs), 1))
    return step, waves * decode_steps_per_round(cfg) * step


def plan_timing(cfg: LauncherConfig, params: ParamCounts, batch: BatchPlan, inf_mem: InferenceMemory,
                trainer_gpus: int, swap_seconds: float, has_kda: bool) -> TimingPlan:
    step, round_s = _generation_round_s(cfg, batch, inf_mem, has_kda)
    rounds = generation_rounds(cfg)
    generation = rounds * round_s
    flops_per_s = max(trainer_gpus, 1) * cfg.cluster.gpu.bf16_tflops * 1e12
    passes = 2 if cfg.algorithm.kl_coef > 0 else 1
    logprob = passes * 2 * params.active * batch.tokens_per_step / (flops_per_s * LOGPROB_MFU)
    train = 8 * params.active * batch.tokens_per_step / (flops_per_s * TRAIN_MFU)
    mini = max(batch.mini_batches_per_step or 1, 1)
    phases = {"generation": generation, "logprob_pass": logprob, "train_mini_batch": train / mini}
    phase, longest = max(phases.items(), key=lambda kv: kv[1])
    timeout = max(MIN_TIMEOUT_S, math.ceil(TIMEOUT_MARGIN * longest / 60) * 60)
    return TimingPlan(decode_step_s=step, generation_round_s=round_s, generation_rounds=rounds,
                      generation_s=generation, logprob_pass_s=logprob, train_s=train,
                      longest_wait_s=longest, longest_wait_phase=phase, recommended_nccl_timeout_s=timeout,
                      swap_s=swap_seconds, rollout_s=round_s + swap_seconds,
                      canary_s=canary_check_s(cfg, step, params.active, flops_per_s))


def canary_check_s(cfg: LauncherConfig, decode_step: float, active_params: float, flops_per_s: float) -> float:
    """The canary's prompts run as one wave of min(max_tokens, max_response_len) decode steps on each
    engine; the trainer scores every engine's sequences (prompt and response) in one forward."""
    canary = cfg.run.rollout_checks.canary
    if not canary.prompts:
        return 0.0
    new_tokens = min(canary.max_tokens, cfg.algorithm.max_response_len)
    tokens = canary.prompts * max(cfg.inference.engines, 1) * (cfg.data.max_prompt_len + new_tokens)
    return new_tokens * decode_step + 2 * active_params * tokens / (flops_per_s * LOGPROB_MFU)
