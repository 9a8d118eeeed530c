"""The architecture numbers the Megatron model is built from, read off a model descriptor.

`tiny`, `glm5_3_flash_4layer` and `glm5_3_flash` go through the same code: only these
numbers differ. Null schedules resolve to HF glm5_next's defaults (Glm5NextTextConfig).
"""
from dataclasses import dataclass, fields

import torch


@dataclass(frozen=True)
class ModelSpec:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    moe_intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    n_routed_experts: int
    num_experts_per_tok: int
    n_shared_experts: int
    routed_scaling_factor: float
    swiglu_limit: float | None
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    index_kpool: int
    index_kpool_always_select_tail: bool
    indexer_types: tuple[str, ...]
    linear_num_heads: int
    linear_head_dim: int
    linear_conv_kernel_dim: int
    linear_lower_bound: float | None
    hc_mult: int
    hc_sinkhorn_iters: int
    hc_eps: float
    rms_norm_eps: float
    layer_types: tuple[str, ...]
    mlp_layer_types: tuple[str, ...]
    tie_word_embeddings: bool
    dtype: torch.dtype
    pad_token_id: int | None = None
    """Embedding row HF never trains (nn.Embedding padding_idx); None = every row trains."""

    @classmethod
    def from_arch(cls, arch, dtype: torch.dtype | str, pad_token_id: int | None = None) -> "ModelSpec":
        """From `config.model.arch` (ArchConfig or its OmegaConf node), `model.dtype` and the
        tokenizer's pad id (what HF's embedding gets as padding_idx)."""
        layers = arch.num_hidden_layers
        layer_types = arch.layer_types or ["indexed_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)]
        mlp_types = arch.mlp_layer_types or ["dense"] * min(3, layers) + ["sparse"] * max(0, layers - 3)
        indexer_types = arch.indexer_types or ["full"] * layers
        values = {f.name: getattr(arch, f.name) for f in fields(cls)
                  if f.name not in ("layer_types", "mlp_layer_types", "indexer_types", "dtype", "pad_token_id")}
        dtype = getattr(torch, getattr(dtype, "value", dtype)) if not isinstance(dtype, torch.dtype) else dtype
        return cls(**values, layer_types=tuple(layer_types), mlp_layer_types=tuple(mlp_types),
                   indexer_types=tuple(indexer_types), dtype=dtype, pad_token_id=pad_token_id)

    @property
    def kda_width(self) -> int:
        return self.linear_num_heads * self.linear_head_dim
