"""Phase-time estimates and the collective timeout they imply (docs/model.md section 5, item 7).

A trainer rank can sit inside one collective for a whole phase: during generation
(colocated ranks wait for the engines, async ranks for a full batch) and during a
log-prob pass. The NCCL timeout must exceed the longest of these, with margin.
Deliberately pessimistic constants, so the timeout errs long:
- decode step = DECODE_WEIGHT_READS x (engine weights per GPU / HBM bandwidth) + fixed
  overhead; generation runs ceil(sequences per engine / concurrency) waves of
  max_response_len steps;
- log-prob and training passes run at LOGPROB_MFU / TRAIN_MFU of the bf16 peak on
  2 (forward) or 6 (forward + backward, plus recompute) x active params per token.
"""
import math
from dataclasses import dataclass

from launcher.config.schema.root import LauncherConfig
from launcher.plan.batch import BatchPlan
from launcher.plan.memory_inference import InferenceMemory
from launcher.plan.params import ParamCounts

DECODE_WEIGHT_READS = 2.5
DECODE_OVERHEAD_S = 0.005
LOGPROB_MFU = 0.15
TRAIN_MFU = 0.2
TIMEOUT_MARGIN = 2.0
MIN_TIMEOUT_S = 600
PINNED_OFFLOAD_GIB_PER_S = 51.0
"""A colocated trainer's offload to (and reload from) its pinned host buffers once they exist:
55 GB/s each way on the H200 (benchmarks/offload_bandwidth.py, docs/results.md)."""
SWAP_OVERHEAD_S = 2.0
"""The rest of a colocated swap: the engine's wake and sleep, cache releases, the Ray calls. The
4-layer slice's steady steps spent 3.9-5.5 s of rollout outside generation, ~1.9 s of it copies."""


@dataclass
class TimingPlan:
    decode_step_s: float
    generation_s: float
    logprob_pass_s: float
    train_s: float
    longest_wait_s: float
    longest_wait_phase: str
    recommended_nccl_timeout_s: int
    swap_s: float
    """Colocated, per step: the trainer off the GPU and back, the engines woken and put to sleep."""


def _generation_s(cfg: LauncherConfig, batch: BatchPlan, inf_mem: InferenceMemory) -> tuple[float, float]:
    inf = cfg.inference
    bandwidth = cfg.cluster.gpu.hbm_tbps * 1e12
    step = DECODE_WEIGHT_READS * inf_mem.weights_gib * 2**30 / bandwidth + DECODE_OVERHEAD_S
    per_engine = math.ceil(batch.sequences_per_step / max(inf.engines, 1))
    waves = math.ceil(per_engine / max(min(inf.concurrency_per_engine, inf.max_num_seqs), 1))
    return step, waves * cfg.algorithm.max_response_len * step


def swap_s(offloaded_gib_per_gpu: float, colocated: bool) -> float:
    """Seconds per step of a colocated swap: the offload and the reload, and the fixed rest."""
    return 2 * offloaded_gib_per_gpu / PINNED_OFFLOAD_GIB_PER_S + SWAP_OVERHEAD_S if colocated else 0.0


def plan_timing(cfg: LauncherConfig, params: ParamCounts, batch: BatchPlan, inf_mem: InferenceMemory,
                trainer_gpus: int, swap_seconds: float) -> TimingPlan:
    step, generation = _generation_s(cfg, batch, inf_mem)
    flops_per_s = max(trainer_gpus, 1) * cfg.cluster.gpu.bf16_tflops * 1e12
    passes = 2 if cfg.algorithm.kl_coef > 0 else 1
    logprob = passes * 2 * params.active * batch.tokens_per_step / (flops_per_s * LOGPROB_MFU)
    train = 8 * params.active * batch.tokens_per_step / (flops_per_s * TRAIN_MFU)
    mini = max(batch.mini_batches_per_step or 1, 1)
    phases = {"generation": generation, "logprob_pass": logprob, "train_mini_batch": train / mini}
    phase, longest = max(phases.items(), key=lambda kv: kv[1])
    timeout = max(MIN_TIMEOUT_S, math.ceil(TIMEOUT_MARGIN * longest / 60) * 60)
    return TimingPlan(decode_step_s=step, generation_s=generation, logprob_pass_s=logprob, train_s=train,
                      longest_wait_s=longest, longest_wait_phase=phase, recommended_nccl_timeout_s=timeout,
                      swap_s=swap_seconds)
