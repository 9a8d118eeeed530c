"""The one Megatron <-> checkpoint name table: how each whole Megatron tensor is made of the
tensors a GLM-5.3-Flash checkpoint holds on disk (what `save_pretrained` writes and vLLM's
Glm5Next loader takes: `self_attn.f_a_proj`, `q_conv1d`/`k_conv1d`/`v_conv1d`,
`hc_attn_fn`, per-expert `mlp.experts.{e}.gate_proj`), never transformers' in-memory names.

Each row is (Megatron name, layout, checkpoint names); a layout is exactly invertible, so
checkpoint -> Megatron -> checkpoint is bit-exact (model/megatron/mapping.py applies them):
- ONE: the same tensor;
- ROWS: the row concatenation of several (SwiGLU gate|up);
- CONV: the row concatenation of q/k/v short-conv weights without their unit dim;
- EXPERTS: the stack over routed experts e of ROWS of the names with `{e}` filled in.
Plain Python (no torch, no megatron): the hf backends, the vLLM venv and the planner read it.
The hf backends reach the same tensor names through transformers' own glm5_next conversion
rules (launcher/workers/hf/names.py); a test checks both against what `save_pretrained` writes.
"""

LM = "model.language_model."
ONE, ROWS, CONV, EXPERTS = "one", "rows", "conv", "experts"

# (Megatron name under layers.{i}., layout, checkpoint names under model.language_model.layers.{i}.)
KDA_TABLE = [(f"self_attention.{n}.weight", ONE, (f"self_attn.{n}.weight",))
             for n in ("q_proj", "k_proj", "v_proj", "b_proj", "f_a_proj", "f_b_proj", "g_a_proj", "g_b_proj",
                       "o_proj")] + [
    ("self_attention.dt_bias", ONE, ("self_attn.dt_bias",)),
    ("self_attention.A_log", ONE, ("self_attn.A_log",)),
    ("self_attention.o_norm", ONE, ("self_attn.o_norm.weight",)),
    ("self_attention.conv1d", CONV, tuple(f"self_attn.{p}_conv1d.weight" for p in "qkv")),
]
MLA_TABLE = [(m, ONE, (h,)) for m, h in (
    ("self_attention.linear_q_down_proj.weight", "self_attn.q_a_proj.weight"),
    ("self_attention.q_layernorm.weight", "self_attn.q_a_layernorm.weight"),
    ("self_attention.linear_q_up_proj.weight", "self_attn.q_b_proj.weight"),
    ("self_attention.linear_kv_down_proj.weight", "self_attn.kv_a_proj_with_mqa.weight"),
    ("self_attention.kv_layernorm.weight", "self_attn.kv_a_layernorm.weight"),
    ("self_attention.linear_kv_up_proj.weight", "self_attn.kv_b_proj.weight"),
    ("self_attention.linear_proj.weight", "self_attn.o_proj.weight"),
    ("self_attention.indexer.linear_wq_b.weight", "self_attn.indexer.wq_b.weight"),
    ("self_attention.indexer.linear_wk.weight", "self_attn.indexer.wk.weight"),
    ("self_attention.indexer.k_norm.weight", "self_attn.indexer.k_norm.weight"),
    ("self_attention.indexer.k_norm.bias", "self_attn.indexer.k_norm.bias"),
    ("self_attention.indexer.linear_weights_proj.weight", "self_attn.indexer.weights_proj.weight"),
    ("self_attention.indexer.kpool_ape", "self_attn.indexer.index_kpool_compress_ape"),
    ("self_attention.indexer.kpool_gate", "self_attn.indexer.index_kpool_compress_gate"),
)]
DENSE_TABLE = [
    ("mlp.linear_fc1.weight", ROWS, ("mlp.gate_proj.weight", "mlp.up_proj.weight")),
    ("mlp.linear_fc2.weight", ONE, ("mlp.down_proj.weight",)),
]
MOE_TABLE = [
    ("mlp.router_weight", ONE, ("mlp.gate.weight",)),
    ("mlp.expert_bias", ONE, ("mlp.gate.e_score_correction_bias",)),
    ("mlp.experts.linear_fc1.weight", EXPERTS, ("mlp.experts.{e}.gate_proj.weight", "mlp.experts.{e}.up_proj.weight")),
    ("mlp.experts.linear_fc2.weight", EXPERTS, ("mlp.experts.{e}.down_proj.weight",)),
    ("mlp.shared_experts.linear_fc1.weight", ROWS,
     ("mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight")),
    ("mlp.shared_experts.linear_fc2.weight", ONE, ("mlp.shared_experts.down_proj.weight",)),
]
COMMON_TABLE = [
    ("input_layernorm.weight", ONE, ("input_layernorm.weight",)),
    ("pre_mlp_layernorm.weight", ONE, ("post_attention_layernorm.weight",)),
] + [(f"{hc}_hc.{p}", ONE, (f"hc_{hc}_{p}",)) for hc in ("attn", "ffn") for p in ("fn", "base", "scale")]
TOP_TABLE = [
    ("word_embeddings", ONE, (LM + "embed_tokens.weight",)),
    ("final_layernorm.weight", ONE, (LM + "norm.weight",)),
    ("output_layer", ONE, ("lm_head.weight",)),
]
ATTENTION_MODULES = {m.split(".")[1]: h[0].split(".")[1] for m, _, h in KDA_TABLE + MLA_TABLE
                     if m.count(".") == 2 and m.endswith(".weight")}
"""Megatron attention module -> its checkpoint module (LoRA targets and adapter names)."""
MLP_PROJECTIONS = {"linear_fc1": ("gate_proj", "up_proj"), "linear_fc2": ("down_proj",)}
"""Megatron MLP module -> the checkpoint projections it is the row concatenation of."""


def name_table(spec) -> list[tuple[str, str, tuple[str, ...]]]:
    """Every (Megatron name, layout, checkpoint names) row of the model a spec describes."""
    rows = list(TOP_TABLE)
    for i in range(spec.num_hidden_layers):
        layer = KDA_TABLE if spec.layer_types[i] == "linear_attention" else MLA_TABLE
        if layer is MLA_TABLE and spec.indexer_types[i] == "shared":
            layer = [row for row in MLA_TABLE if ".indexer." not in row[0]]
        mlp = MOE_TABLE if spec.mlp_layer_types[i] == "sparse" else DENSE_TABLE
        rows += [(f"layers.{i}.{m}", kind, tuple(f"{LM}layers.{i}.{h}" for h in hs))
                 for m, kind, hs in layer + mlp + COMMON_TABLE]
    return rows


def part_names(kind: str, names: tuple[str, ...], experts: int) -> list[str]:
    """The checkpoint tensors of one row, in the order `split` yields them."""
    if kind == EXPERTS:
        return [n.format(e=e) for e in range(experts) for n in names]
    return list(names)
