"""Which engine weights are FP8 under `inference.weights_dtype: fp8`, and what they weigh.

The engines run vLLM's online block-FP8 quantization (`quantization="fp8_per_block"`: E4M3
weights with an FP32 scale per 128x128 block, vllm/config/quantization.py:197 in 0.32, :277 in
0.34). The trainer's BF16 weights arrive as before; vLLM's layerwise reload
(model_loader/reload/layerwise.py: `initialize_online_processing`, then the layer's
`process_weights_after_loading`) buffers each layer until all its weights are in and quantizes
it there, on every sync and transport (buckets, CUDA IPC, NCCL all load inside that reload).
Only layers built with the quantization config take it; the rest stay BF16. For vLLM's
Glm5Next (0.32) that is the MLPs alone: dense, shared and routed experts. KDA
(vllm/models/glm5next/common/kda.py:210-216) and MLA with its DSA indexer
(common/model.py:397, common/attention.py:242) are built without it, the router has none
(common/model.py:239-244), embeddings and the LM head are no linear layer, and norms, mHC,
convs and biases are plain parameters. Other model types (qwen3-style attention) take it in
q/k/v/o too. docs/fp8_rollouts.md has the list. No torch here: the planner prices the bytes
from the architecture fields.
"""
import math

from launcher.config.schema.choices import WeightsDtype
from launcher.config.schema.model import ArchConfig
from launcher.config.schema.root import LauncherConfig
from launcher.plan.arch import DSA, KDA, SPARSE, facts, per_arch
from launcher.plan.memory_trainer import DTYPE_BYTES

BLOCK = 128
"""Rows and columns of one scale block (vLLM's weight_block_size [128, 128])."""
SCALE_BYTES = 4
"""One FP32 weight_scale_inv per block."""
def _swiglu(h: int, inner: int, count: int) -> list[tuple[int, int, int]]:
    return [(inner, h, 2 * count), (h, inner, count)]  # gate and up [inner, h]; down [h, inner]


@per_arch
def quantized_matrices(a: ArchConfig) -> tuple[tuple[int, int, int], ...]:
    """(rows, columns, how many) of every FP8 matrix (zero counts skipped by the sums) of the model, the formulas of
    launcher/plan/shapes.py for the checkpoint names vLLM quantizes (tests/unit/plan/test_fp8_plan.py checks they agree)."""
    f, h, out = facts(a), a.hidden_size, []
    for attention, mlp in zip(f.layer_types, f.mlp_layer_types, strict=False):
        if attention not in (KDA, DSA) and not f.is_glm5_next:
            hd = a.head_dim or h // a.num_attention_heads
            q, kv = a.num_attention_heads * hd, a.num_key_value_heads * hd
            out += [(q, h, 1), (kv, h, 2), (h, q, 1)]
        if mlp != SPARSE:
            out += _swiglu(h, a.intermediate_size, 1)
            continue
        out += _swiglu(h, a.moe_intermediate_size, a.n_routed_experts)
        if a.n_shared_experts:
            out += _swiglu(h, a.moe_intermediate_size * a.n_shared_experts, 1)
    return tuple(out)


def scale_blocks(rows: int, cols: int) -> int:
    """Blocks of one matrix: a partial block at either edge has a scale of its own."""
    return math.ceil(rows / BLOCK) * math.ceil(cols / BLOCK)


def quantized_elements(a: ArchConfig) -> int:
    return sum(r * c * n for r, c, n in quantized_matrices(a))


def scale_bytes(a: ArchConfig) -> int:
    return sum(scale_blocks(r, c) * n for r, c, n in quantized_matrices(a)) * SCALE_BYTES


def fp8_saving_bytes(a: ArchConfig, dtype_bytes: int) -> int:
    """Bytes the whole model loses going FP8: each quantized element drops from the model dtype
    to 1 B, and each block gains its scale. Every quantized matrix is sharded over an engine's
    tp GPUs (MLPs and experts; plain q/k/v/o), so a GPU saves this / tp."""
    return quantized_elements(a) * (dtype_bytes - 1) - scale_bytes(a)


def engine_saving_bytes(cfg: LauncherConfig) -> int:
    """What the whole model weighs less in the engines than in the model dtype: 0 for bf16."""
    if cfg.inference.weights_dtype is not WeightsDtype.fp8:
        return 0
    return fp8_saving_bytes(cfg.model.arch, DTYPE_BYTES[cfg.model.dtype.value])


def largest_layer_elements(a: ArchConfig) -> int:
    """Elements of the largest layer vLLM quantizes in one go: the layerwise reload holds a layer's
    BF16 weights until every one has arrived. A MoE layer's routed experts are one layer (gate, up
    and down of every expert); a dense or shared MLP is two (the merged gate_up and down)."""
    f, h, sizes = facts(a), a.hidden_size, [0]
    for mlp in f.mlp_layer_types:
        if mlp == SPARSE:
            sizes.append(3 * a.n_routed_experts * h * a.moe_intermediate_size)
            sizes.append(2 * h * a.moe_intermediate_size * a.n_shared_experts)
        else:
            sizes.append(2 * h * a.intermediate_size)
    return max(sizes)
