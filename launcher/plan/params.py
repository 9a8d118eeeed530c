"""Exact parameter counts from architecture fields, split the way parallelism splits them.

Each component is counted as (tp: sharded over tensor parallel ranks, rep: replicated on
every TP rank, exp: routed experts, sharded over EP x ETP). The split follows docs/model.md
section 3: MLA down-projections and norms, the DSA indexer, KDA f_a/g_a/o_norm, the router,
mHC and all norms are replicated. Shapes mirror HF glm5_next parameter for parameter
(checked against a meta-device build: 313,326,816,766 total for the default config).
"""
from dataclasses import dataclass, field

from launcher.config.schema.model import ArchConfig
from launcher.plan.arch import DSA, KDA, SPARSE, facts, per_arch


@dataclass
class Split:
    tp: int = 0
    rep: int = 0
    exp: int = 0

    @property
    def total(self) -> int:
        return self.tp + self.rep + self.exp

    def __add__(self, other: "Split") -> "Split":
        return Split(self.tp + other.tp, self.rep + other.rep, self.exp + other.exp)


@dataclass
class ParamCounts:
    total: int
    active: int
    split: Split
    components: dict[str, int] = field(default_factory=dict)
    expert_one: int = 0
    """Parameters of one routed expert (gate, up, down)."""


def kda_split(a: ArchConfig) -> Split:
    width = a.linear_num_heads * a.linear_head_dim
    hd, h = a.linear_head_dim, a.hidden_size
    tp = (3 * width * h + 3 * width * a.linear_conv_kernel_dim + width + a.linear_num_heads
          + 2 * width * hd + a.linear_num_heads * h + h * width)
    rep = 2 * hd * h + hd  # f_a_proj, g_a_proj, o_norm
    return Split(tp=tp, rep=rep)


def mla_split(a: ArchConfig) -> Split:
    h, heads = a.hidden_size, a.num_attention_heads
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    rep = a.q_lora_rank * h + a.q_lora_rank + (a.kv_lora_rank + a.qk_rope_head_dim) * h + a.kv_lora_rank
    tp = (heads * qk * a.q_lora_rank + heads * (a.qk_nope_head_dim + a.v_head_dim) * a.kv_lora_rank
          + h * heads * a.v_head_dim)
    return Split(tp=tp, rep=rep)


def indexer_params(a: ArchConfig) -> int:
    h, ihd = a.hidden_size, a.index_head_dim
    pool = a.index_kpool * ihd + ihd * h  # pool position embedding + compress gate (HF builds them for any kpool)
    return pool + a.index_n_heads * ihd * a.q_lora_rank + ihd * h + 2 * ihd + a.index_n_heads * h


def gqa_split(a: ArchConfig) -> Split:
    """Plain attention (qwen3-style): q, k, v, o sharded; per-head q/k norms replicated."""
    hd = a.head_dim or a.hidden_size // a.num_attention_heads
    q, kv = a.num_attention_heads * hd, a.num_key_value_heads * hd
    return Split(tp=a.hidden_size * (2 * q + 2 * kv), rep=2 * hd)


def mlp_split(a: ArchConfig, kind: str) -> Split:
    h = a.hidden_size
    if kind != SPARSE:
        return Split(tp=3 * h * a.intermediate_size)
    expert = 3 * h * a.moe_intermediate_size
    return Split(tp=a.n_shared_experts * expert, rep=a.n_routed_experts * h, exp=a.n_routed_experts * expert)


def mhc_params(a: ArchConfig) -> int:
    """HF builds both hyper-connection modules for any hc_mult, 1 included."""
    n = a.hc_mult
    return 2 * ((2 + n) * n * n * a.hidden_size + (2 + n) * n + 3)


def attention_split(a: ArchConfig, kind: str, indexer: str) -> Split:
    """`indexer` is the layer's indexer_types entry: a `shared` DSA layer reuses an earlier top-k."""
    if kind == KDA:
        return kda_split(a)
    if kind == DSA:
        return mla_split(a) + Split(rep=indexer_params(a) if indexer == "full" else 0)
    return gqa_split(a)


@per_arch
def count_params(a: ArchConfig) -> ParamCounts:
    """Exact counts, memoised per architecture."""
    f = facts(a)
    h = a.hidden_size
    embed = a.vocab_size * h
    head = 0 if a.tie_word_embeddings else embed
    comps = {"embedding": embed, "lm_head": head, "final_norm": h}
    split = Split(tp=embed + head, rep=h)
    indexers = a.indexer_types or ["full"] * a.num_hidden_layers
    for kind, indexer in zip(f.layer_types, indexers, strict=False):
        s = attention_split(a, kind, indexer)
        comps[f"attention.{kind}"] = comps.get(f"attention.{kind}", 0) + s.total
        split = split + s
    for kind in f.mlp_layer_types:
        s = mlp_split(a, kind)
        key = "mlp.dense" if kind != SPARSE else "mlp.moe_non_expert"
        comps[key] = comps.get(key, 0) + s.tp + s.rep
        if s.exp:
            comps["mlp.routed_experts"] = comps.get("mlp.routed_experts", 0) + s.exp
        split = split + s
    per_layer_rep = 2 * h + mhc_params(a)
    comps["norms"] = 2 * h * a.num_hidden_layers
    comps["mhc"] = mhc_params(a) * a.num_hidden_layers
    split = split + Split(rep=per_layer_rep * a.num_hidden_layers)
    expert_one = 3 * h * a.moe_intermediate_size
    inactive = f.n_moe * (a.n_routed_experts - a.num_experts_per_tok) * expert_one if f.has_moe else 0
    return ParamCounts(total=split.total, active=split.total - inactive, split=split,
                       components=comps, expert_one=expert_one)
