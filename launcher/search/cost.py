"""A deliberately simple step-time model for ranking meshes (not a simulator).

step = generation + log-prob pass + training compute + TP traffic + MoE all-to-all
       + DP gradient reduction + weight sync, with no overlap (pessimistic, same for every
       mesh, so the ranking is what matters).
- Compute: 2 (log-prob) + 6 (train) x active params x tokens at COMPUTE_MFU of the bf16 peak,
  spread over the trainer GPUs; generation and sync come from the planner.
- TP: per layer and token, 4 collectives (2 forward, 2 backward) of hidden_size bf16 values,
  (tp - 1) / tp of them cross the link; the link is NVLink when tp fits a node.
- MoE: per MoE layer and token, top-k hidden_size bf16 vectors dispatched and combined,
  forward and backward (4 transfers), (ep - 1) / ep cross the link; NVLink when ep x etp x tp
  fits a node, else the network; with etp > 1 the same vectors are reduced across the etp
  group (NVLink when etp fits a node).
- DP: trainable gradients (LoRA adapters or all weights) reduced once per mini-batch in fp32.
"""
from dataclasses import dataclass

COMPUTE_MFU = 0.3
BF16, FP32 = 2, 4


@dataclass
class StepEstimate:
    generation_s: float
    compute_s: float
    tp_comm_s: float
    moe_comm_s: float
    dp_comm_s: float
    sync_s: float
    total_s: float


def _link_bytes_per_s(cfg, group_gpus: int) -> float:
    links = cfg.cluster.links
    gbps = links.intra_node_gbps if group_gpus <= cfg.cluster.gpus_per_node else links.inter_node_gbps
    return gbps * 1e9 / 8


def estimate_step(cfg, plan) -> StepEstimate:
    m, a, b = plan.mesh, cfg.model.arch, plan.batch
    flops = 8 * plan.params.active * b.tokens_per_step
    compute = flops / (m.trainer_gpus * cfg.cluster.gpu.bf16_tflops * 1e12 * COMPUTE_MFU)
    tokens_per_rank = b.tokens_per_step / (m.dp or 1)
    tp_bytes = tokens_per_rank * a.num_hidden_layers * 4 * a.hidden_size * BF16 * (m.tp - 1) / m.tp
    tp_comm = tp_bytes / _link_bytes_per_s(cfg, m.tp)
    moe_bytes = (tokens_per_rank / m.tp) * plan.arch.n_moe * a.num_experts_per_tok * a.hidden_size * BF16 * 4
    moe_comm = moe_bytes * (m.ep - 1) / m.ep / _link_bytes_per_s(cfg, m.ep * m.etp * m.tp)
    moe_comm += moe_bytes * (m.etp - 1) / m.etp / _link_bytes_per_s(cfg, m.etp)
    trainable = plan.lora.params_per_gpu if plan.lora.enabled else plan.memory.trainer.weights_gib * 2**30 / BF16
    dp_bytes = 2 * trainable * FP32 * max(b.mini_batches_per_step or 1, 1) * ((m.dp or 1) - 1) / (m.dp or 1)
    dp_comm = dp_bytes / _link_bytes_per_s(cfg, m.trainer_gpus)
    gen, sync = plan.timing.generation_s, plan.sync.seconds
    total = gen + compute + tp_comm + moe_comm + dp_comm + sync
    return StepEstimate(generation_s=gen, compute_s=compute, tp_comm_s=tp_comm, moe_comm_s=moe_comm,
                        dp_comm_s=dp_comm, sync_s=sync, total_s=total)
