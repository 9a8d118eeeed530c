"""HF glm5_next <-> Megatron weights: a name table plus sharding read off each parameter.

Two steps, each exactly invertible, so HF -> Megatron -> HF is bit-exact:
1. names and layout (this table): one Megatron tensor is one HF tensor, or the row
   concatenation of several (SwiGLU gate|up), or the HF conv weight without its unit dim;
2. sharding (shards.py): the whole Megatron tensor is split by the attributes every
   parameter carries (partition_dim/stride over TP or ETP, experts over EP).
megatron-bridge 0.6.2 is not used: it pins transformers <= 5.12.1 (glm5_next needs >= 5.16)
and imports TransformerEngine, which the training machines here do not have.
"""
import torch

LM = "model.language_model."

# (Megatron name under layers.{i}., HF names under model.language_model.layers.{i}.)
KDA_TABLE = [(f"self_attention.{n}.weight", (f"self_attn.{n}.weight",))
             for n in ("q_proj", "k_proj", "v_proj", "b_proj", "g_a_proj", "g_b_proj", "o_proj")] + [
    ("self_attention.f_a_proj.weight", ("self_attn.forget_gate.f_a_proj.weight",)),
    ("self_attention.f_b_proj.weight", ("self_attn.forget_gate.f_b_proj.weight",)),
    ("self_attention.dt_bias", ("self_attn.forget_gate.dt_bias",)),
    ("self_attention.A_log", ("self_attn.forget_gate.A_log",)),
    ("self_attention.o_norm", ("self_attn.o_norm.weight",)),
    ("self_attention.conv1d", ("self_attn.conv1d.weight",)),
]
MLA_TABLE = [
    ("self_attention.linear_q_down_proj.weight", ("self_attn.q_a_proj.weight",)),
    ("self_attention.q_layernorm.weight", ("self_attn.q_a_layernorm.weight",)),
    ("self_attention.linear_q_up_proj.weight", ("self_attn.q_b_proj.weight",)),
    ("self_attention.linear_kv_down_proj.weight", ("self_attn.kv_a_proj_with_mqa.weight",)),
    ("self_attention.kv_layernorm.weight", ("self_attn.kv_a_layernorm.weight",)),
    ("self_attention.linear_kv_up_proj.weight", ("self_attn.kv_b_proj.weight",)),
    ("self_attention.linear_proj.weight", ("self_attn.o_proj.weight",)),
    ("self_attention.indexer.linear_wq_b.weight", ("self_attn.indexer.wq_b.weight",)),
    ("self_attention.indexer.linear_wk.weight", ("self_attn.indexer.wk.weight",)),
    ("self_attention.indexer.k_norm.weight", ("self_attn.indexer.k_norm.weight",)),
    ("self_attention.indexer.k_norm.bias", ("self_attn.indexer.k_norm.bias",)),
    ("self_attention.indexer.linear_weights_proj.weight", ("self_attn.indexer.weights_proj.weight",)),
    ("self_attention.indexer.kpool_ape", ("self_attn.indexer.index_kpool_compress_ape",)),
    ("self_attention.indexer.kpool_gate", ("self_attn.indexer.index_kpool_compress_gate",)),
]
DENSE_TABLE = [
    ("mlp.linear_fc1.weight", ("mlp.gate_proj.weight", "mlp.up_proj.weight")),
    ("mlp.linear_fc2.weight", ("mlp.down_proj.weight",)),
]
MOE_TABLE = [
    ("mlp.router_weight", ("mlp.gate.weight",)),
    ("mlp.expert_bias", ("mlp.gate.e_score_correction_bias",)),
    ("mlp.experts.linear_fc1.weight", ("mlp.experts.gate_up_proj",)),
    ("mlp.experts.linear_fc2.weight", ("mlp.experts.down_proj",)),
    ("mlp.shared_experts.linear_fc1.weight", ("mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight")),
    ("mlp.shared_experts.linear_fc2.weight", ("mlp.shared_experts.down_proj.weight",)),
]
COMMON_TABLE = [
    ("input_layernorm.weight", ("input_layernorm.weight",)),
    ("pre_mlp_layernorm.weight", ("post_attention_layernorm.weight",)),
] + [(f"{hc}.{p}", (f"{hc}.{p}",)) for hc in ("attn_hc", "ffn_hc") for p in ("fn", "base", "scale")]
TOP_TABLE = [
    ("word_embeddings", (LM + "embed_tokens.weight",)),
    ("final_layernorm.weight", (LM + "norm.weight",)),
    ("output_layer", ("lm_head.weight",)),
]


def name_table(spec) -> list[tuple[str, tuple[str, ...]]]:
    """Every (Megatron name, HF names) pair of the model a spec describes."""
    rows = list(TOP_TABLE)
    for i in range(spec.num_hidden_layers):
        layer = KDA_TABLE if spec.layer_types[i] == "linear_attention" else MLA_TABLE
        if layer is MLA_TABLE and spec.indexer_types[i] == "shared":
            layer = [row for row in MLA_TABLE if ".indexer." not in row[0]]
        mlp = MOE_TABLE if spec.mlp_layer_types[i] == "sparse" else DENSE_TABLE
        rows += [(f"layers.{i}.{m}", tuple(f"{LM}layers.{i}.{h}" for h in hs)) for m, hs in layer + mlp + COMMON_TABLE]
    return rows


def megatron_from_hf(hf_state: dict[str, torch.Tensor], spec) -> dict[str, torch.Tensor]:
    """Whole (unsharded) Megatron tensors from an HF state dict."""
    out = {}
    for mname, hnames in name_table(spec):
        tensors = [hf_state[h] for h in hnames]
        if mname.endswith("conv1d"):
            out[mname] = tensors[0].squeeze(1)
        else:
            out[mname] = torch.cat(tensors, dim=0) if len(tensors) > 1 else tensors[0]
    return out


def hf_parts(mname: str, hnames: tuple[str, ...], tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The HF tensors one whole Megatron tensor becomes (a name_table row)."""
    if mname.endswith("conv1d"):
        return [(hnames[0], tensor.unsqueeze(1))]
    return list(zip(hnames, tensor.chunk(len(hnames), dim=0), strict=True))


def hf_from_megatron(full_state: dict[str, torch.Tensor], spec) -> dict[str, torch.Tensor]:
    """HF-named tensors (what the hf engine and vLLM load) from whole Megatron tensors."""
    return dict(part for mname, hnames in name_table(spec) for part in hf_parts(mname, hnames, full_state[mname]))
