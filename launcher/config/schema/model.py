"""`model:` section: which network is trained, described by its HF config fields.

Every rule reads model facts from `arch` (has mHC = hc_mult > 1, has KDA = a
`linear_attention` layer, ...), never from `name`, so one rule covers every model
with the feature. Field names and defaults are the HF `glm5_next` text config's.
"""
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Optional

from launcher.config.schema.choices import DType


@dataclass
class ArchConfig:
    model_type: str = "glm5_next"
    """HF model type the `hf` backends instantiate (glm5_next, or any causal LM type such as qwen3)."""
    vocab_size: int = 154880
    """Token vocabulary; Megatron pads it to a multiple of 128 x trainer.mesh.tp."""
    hidden_size: int = 4096
    """Residual width H; mHC keeps hc_mult copies of it per token."""
    intermediate_size: int = 12288
    """Dense MLP width (dense layers); must divide by trainer.mesh.tp."""
    moe_intermediate_size: int = 2048
    """Width of one routed or shared expert; must divide by trainer.mesh.etp."""
    num_hidden_layers: int = 45
    """Number of decoder layers; length of layer_types / mlp_layer_types when given."""
    num_attention_heads: int = 64
    """MLA (DSA layer) query heads; must divide by trainer.mesh.tp and inference.tp."""
    num_key_value_heads: int = 64
    """KV heads (equal to attention heads for MLA; used by non-MLA model types)."""
    head_dim: Optional[int] = None
    """Per-head width for non-MLA model types (e.g. qwen3); null for glm5_next."""
    n_routed_experts: int = 288
    """Routed experts per MoE layer; must divide by trainer.mesh.ep (and inference.ep)."""
    num_experts_per_tok: int = 8
    """Experts each token is routed to (top-k); LoRA rank % top-k with normalize_moe_lora."""
    n_shared_experts: int = 1
    """Always-on shared experts per MoE layer (width moe_intermediate_size each)."""
    routed_scaling_factor: float = 2.5
    """Scale applied to the routed experts' combined output."""
    swiglu_limit: Optional[float] = 10.0
    """Clamp of the SwiGLU gate/up activations; null = unclamped."""
    q_lora_rank: int = 1536
    """MLA query down-projection rank."""
    kv_lora_rank: int = 512
    """MLA latent KV rank: what the DSA KV cache stores per token per layer (bf16)."""
    qk_nope_head_dim: int = 256
    """MLA per-head query/key width without rotary embedding."""
    qk_rope_head_dim: int = 0
    """MLA rotary width; GLM-5.3-Flash is NoPE (0), HF rejects > 0 for glm5_next."""
    v_head_dim: int = 256
    """MLA per-head value width."""
    index_n_heads: int = 32
    """DSA indexer heads (the indexer is replicated on every TP rank)."""
    index_head_dim: int = 128
    """DSA indexer head width; the indexer key cache stores it per pool per layer."""
    index_topk: int = 2048
    """Positions (tokens or pools) the DSA indexer selects; sequences longer than this need index_kpool > 1."""
    index_kpool: int = 16
    """Tokens per k-pool of the indexer; index_topk % index_kpool == 0; 1 = no pooling."""
    index_kpool_always_select_tail: bool = True
    """Always attend to the incomplete last pool (HF default)."""
    indexer_types: Optional[list[str]] = None
    """Per-layer indexer mode, `full` or `shared`; null = HF's default schedule."""
    linear_num_heads: int = 64
    """KDA heads; must divide by trainer.mesh.tp and inference.tp."""
    linear_head_dim: int = 128
    """KDA head width; the recurrent state is heads x dim x dim fp32 per sequence."""
    linear_conv_kernel_dim: int = 4
    """KDA short-convolution kernel size (conv state per sequence)."""
    linear_lower_bound: Optional[float] = -5.0
    """Lower bound of the KDA forget gate (log space)."""
    hc_mult: int = 4
    """mHC residual streams; > 1 means the model has mHC (PP must be 1, no full recompute)."""
    hc_sinkhorn_iters: int = 20
    """Sinkhorn iterations normalising the mHC mixing matrix."""
    hc_eps: float = 1.0e-6
    """Epsilon inside the sqrt of GLM's mHC norm (why fused mHC kernels cannot be used)."""
    rms_norm_eps: float = 1.0e-5
    """RMSNorm epsilon of the decoder norms."""
    layer_types: Optional[list[str]] = None
    """Per-layer attention: `linear_attention` (KDA) or `indexed_attention` (DSA);
    null = HF's default (KDA where idx % 4 != 3)."""
    mlp_layer_types: Optional[list[str]] = None
    """Per-layer MLP: `dense` or `sparse` (MoE); null = first 3 dense, rest sparse."""
    tie_word_embeddings: bool = False
    """Share the embedding and lm_head (GLM-5.3-Flash: untied)."""
    max_position_embeddings: int = 1048576
    """Longest position the model supports; bounds inference.max_model_len."""


@dataclass
class ModelConfig:
    name: str = "tiny"
    """Descriptor name (model/descriptors/*.yaml it came from); informational."""
    hf_path: Optional[str] = None
    """Local HF model folder (config.json + safetensors; not a training checkpoint, which is
    `checkpoint.*` and run.resume); null = random init from `arch`. When set, its config.json
    is the architecture: composition copies it into `arch`, and an `arch` value that disagrees
    with it is an error (MODEL006)."""
    tokenizer_path: Optional[str] = None
    """HF tokenizer folder (tokenizer.json or tokenizer_config.json; its generation_config.json,
    when present, lists the ids that end a response); null = model.hf_path's tokenizer, or with
    no model folder the built-in character tokenizer. A relative path is looked up as data.train_path's
    is (the current folder, each LAUNCHER_CONFIG_ROOTS folder, the launcher's shipped data). Lets a
    random-init model read chat-templated prompts (the default recipe: data/tiny_tokenizer); its
    vocabulary must fit model.arch.vocab_size."""
    arch: ArchConfig = field(default_factory=ArchConfig)
    """Architecture fields (HF config names); every model fact a rule needs comes from here. With
    hf_path set they are the model folder's, and a descriptor may leave `arch` out."""
    language_model_only: bool = True
    """Train only the language model; the vision tower is never trained (must stay true)."""
    dtype: DType = DType.bfloat16
    """Parameter dtype of trainer weights and engines; float32 only for CPU tests."""

    # Not a config key (a ClassVar: neither Hydra nor --help sees it); compose sets it per instance.
    declared_arch: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    """With hf_path set: the `arch` fields the descriptor, recipe and command line set, with their
    values from before the model folder's config.json replaced them (what MODEL006 compares)."""
