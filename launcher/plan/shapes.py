"""The shape of every language-model tensor a glm5_next checkpoint holds, from the
architecture fields alone, under its on-disk name (what `save_pretrained` writes).

The trainers and engines fail on a mis-shaped tensor only once every rank has read its
shards; with this table `validate` compares the shards' safetensors headers (plain JSON)
against the config before Ray starts. The formulas are params.py's, tensor by tensor: a
test checks that they add up to count_params and equal the tiny checkpoint's shapes.
Other model types (and the vision tower) have no table here: nothing is checked for them.
"""
from launcher.config.schema.model import ArchConfig
from launcher.plan.arch import DSA, KDA, SPARSE, layer_types_of, mlp_layer_types_of

LM = "model.language_model."


def checkpoint_shapes(a: ArchConfig) -> dict[str, tuple[int, ...]]:
    """{checkpoint tensor name: shape} of the language model; {} for a model type without a table."""
    if a.model_type != "glm5_next":
        return {}
    h, v = a.hidden_size, a.vocab_size
    shapes = {LM + "embed_tokens.weight": (v, h), LM + "norm.weight": (h,)}
    if not a.tie_word_embeddings:
        shapes["lm_head.weight"] = (v, h)
    indexers = a.indexer_types or ["full"] * a.num_hidden_layers
    layers = zip(layer_types_of(a), mlp_layer_types_of(a), indexers, strict=False)
    for i, (attention, mlp, indexer) in enumerate(layers):
        layer = {**_common(a), **_attention(a, attention, indexer), **_mlp(a, mlp)}
        shapes.update({f"{LM}layers.{i}.{name}": shape for name, shape in layer.items()})
    return shapes


def _common(a: ArchConfig) -> dict[str, tuple[int, ...]]:
    """The two norms and both hyper-connection modules (HF builds them for any hc_mult)."""
    h, n = a.hidden_size, a.hc_mult
    out = {"input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,)}
    for hc in ("attn", "ffn"):
        out |= {f"hc_{hc}_fn": ((2 + n) * n, n * h), f"hc_{hc}_base": ((2 + n) * n,), f"hc_{hc}_scale": (3,)}
    return out


def _attention(a: ArchConfig, kind: str, indexer: str) -> dict[str, tuple[int, ...]]:
    if kind == KDA:
        return _kda(a)
    if kind == DSA:
        return {**_mla(a), **(_indexer(a) if indexer == "full" else {})}
    return {}


def _kda(a: ArchConfig) -> dict[str, tuple[int, ...]]:
    h, heads, hd = a.hidden_size, a.linear_num_heads, a.linear_head_dim
    width = heads * hd
    out = {f"self_attn.{p}_proj.weight": (width, h) for p in "qkv"}
    out |= {f"self_attn.{p}_conv1d.weight": (width, 1, a.linear_conv_kernel_dim) for p in "qkv"}
    return out | {
        "self_attn.dt_bias": (width,), "self_attn.A_log": (heads,), "self_attn.b_proj.weight": (heads, h),
        "self_attn.f_a_proj.weight": (hd, h), "self_attn.f_b_proj.weight": (width, hd),
        "self_attn.g_a_proj.weight": (hd, h), "self_attn.g_b_proj.weight": (width, hd),
        "self_attn.o_proj.weight": (h, width), "self_attn.o_norm.weight": (hd,),
    }


def _mla(a: ArchConfig) -> dict[str, tuple[int, ...]]:
    h, heads, rope = a.hidden_size, a.num_attention_heads, a.qk_rope_head_dim
    return {
        "self_attn.q_a_proj.weight": (a.q_lora_rank, h), "self_attn.q_a_layernorm.weight": (a.q_lora_rank,),
        "self_attn.q_b_proj.weight": (heads * (a.qk_nope_head_dim + rope), a.q_lora_rank),
        "self_attn.kv_a_proj_with_mqa.weight": (a.kv_lora_rank + rope, h),
        "self_attn.kv_a_layernorm.weight": (a.kv_lora_rank,),
        "self_attn.kv_b_proj.weight": (heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank),
        "self_attn.o_proj.weight": (h, heads * a.v_head_dim),
    }


def _indexer(a: ArchConfig) -> dict[str, tuple[int, ...]]:
    h, ihd, p = a.hidden_size, a.index_head_dim, "self_attn.indexer."
    return {
        p + "wq_b.weight": (a.index_n_heads * ihd, a.q_lora_rank), p + "wk.weight": (ihd, h),
        p + "k_norm.weight": (ihd,), p + "k_norm.bias": (ihd,), p + "weights_proj.weight": (a.index_n_heads, h),
        p + "index_kpool_compress_ape": (a.index_kpool, ihd), p + "index_kpool_compress_gate": (ihd, h),
    }


def _mlp(a: ArchConfig, kind: str) -> dict[str, tuple[int, ...]]:
    h = a.hidden_size
    if kind != SPARSE:
        return _swiglu("mlp.", h, a.intermediate_size)
    out = {"mlp.gate.weight": (a.n_routed_experts, h), "mlp.gate.e_score_correction_bias": (a.n_routed_experts,)}
    for e in range(a.n_routed_experts):
        out |= _swiglu(f"mlp.experts.{e}.", h, a.moe_intermediate_size)
    if a.n_shared_experts:
        out |= _swiglu("mlp.shared_experts.", h, a.moe_intermediate_size * a.n_shared_experts)
    return out


def _swiglu(prefix: str, h: int, inner: int) -> dict[str, tuple[int, ...]]:
    return {prefix + "gate_proj.weight": (inner, h), prefix + "up_proj.weight": (inner, h),
            prefix + "down_proj.weight": (h, inner)}
