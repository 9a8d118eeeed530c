"""GLM-5.3-Flash's sparse attention layer: NoPE multi-latent attention (MLA) whose keys
are chosen per query by the k-pool indexer.

Names follow Megatron's MLA (linear_q_down_proj, linear_kv_up_proj, linear_proj, ...), so
LoRA targets read the same as in Megatron recipes. Down-projections, their norms and the
indexer are duplicated over TP; up-projections split heads; linear_proj is row-parallel.
Attention runs sequence by sequence with the indexer's boolean mask (PyTorch SDPA).
A layer whose indexer_types entry is "shared" has no indexer: it attends with the masks
the indexed layer just before it chose (HF's cross-layer top-k reuse), handed over in a
TopkRelay that GlmModel gives both layers. With DSA top-k replay (indexer_slot.py) a layer
with its own indexer attends over the engine's pools instead of its indexer's picks.
megatron-core 0.19.2's DSAttention is not used: its indexer hard-wires RoPE, a Hadamard
rotation and token-level (not pooled) top-k, and its attention is tied to absorbed-MLA
layouts, so hosting k-pool selection there would mean replacing most of its forward.
Shape legend: T tokens, S tokens of one sequence, H local heads, R ranks, D hidden.
"""
import torch
import torch.nn.functional as F

from model.megatron.indexer import KPoolIndexer
from model.megatron.packing import Packed
from model.megatron.parallel import ShardedLinear, enter_tp, exit_tp, split_size, tp_size
from model.megatron.rmsnorm import RMSNorm
from model.megatron.spec import ModelSpec


class TopkRelay:
    """The per-sequence masks of the latest forward of a full indexer layer, for the shared
    layer after it. A plain object (not a Module), so it adds no parameters or state."""

    masks: tuple[torch.Tensor, ...] = ()


class SparseMLA(torch.nn.Module):
    def __init__(self, spec: ModelSpec, index: int):
        super().__init__()
        self.relay_in: TopkRelay | None = None
        """Set on a shared layer: where its masks come from."""
        self.relay_out: TopkRelay | None = None
        """Set on a full layer followed by a shared one: where it leaves its masks."""
        dtype, heads = spec.dtype, spec.num_attention_heads
        self.heads = split_size(heads, tp_size(), "num_attention_heads")
        self.qk_dim, self.v_dim = spec.qk_nope_head_dim, spec.v_head_dim
        self.linear_q_down_proj = ShardedLinear(spec.hidden_size, spec.q_lora_rank, "duplicated", dtype)
        self.q_layernorm = RMSNorm(spec.q_lora_rank, spec.rms_norm_eps, dtype)
        self.linear_q_up_proj = ShardedLinear(spec.q_lora_rank, heads * self.qk_dim, "column", dtype)
        self.linear_kv_down_proj = ShardedLinear(spec.hidden_size, spec.kv_lora_rank, "duplicated", dtype)
        self.kv_layernorm = RMSNorm(spec.kv_lora_rank, spec.rms_norm_eps, dtype)
        self.linear_kv_up_proj = ShardedLinear(spec.kv_lora_rank, heads * (self.qk_dim + self.v_dim), "column", dtype)
        self.linear_proj = ShardedLinear(heads * self.v_dim, spec.hidden_size, "row", dtype)
        self.indexer = None if spec.indexer_types[index] == "shared" else KPoolIndexer(spec)
        self.indexer_index = -1
        """This layer's position among the model's full indexers (the engine's pools' L axis)."""
        self.indexer_slot = None
        """An indexer_slot.IndexerSlot when the trainer replays or compares the engine's pools."""

    def given_picks(self, packed: Packed) -> tuple | None:
        """The engine's pools of each sequence for this layer's indexer (None without replay or
        comparison), read by the caller before any activation checkpoint."""
        return None if self.indexer_slot is None else self.indexer_slot.given(self.indexer_index, packed)

    def _attend(self, q_SHE, k_SHE, v_SHE, mask_SS) -> torch.Tensor:
        out_1HSE = F.scaled_dot_product_attention(q_SHE.transpose(0, 1)[None], k_SHE.transpose(0, 1)[None],
                                                  v_SHE.transpose(0, 1)[None], attn_mask=mask_SS[None, None],
                                                  scale=self.qk_dim ** -0.5)
        return out_1HSE[0].transpose(0, 1).flatten(1)

    def forward(self, x_TlD: torch.Tensor, packed: Packed, relayed: tuple[torch.Tensor, ...] | None = None,
                given: tuple | None = None) -> torch.Tensor:
        """`relayed`: a shared layer's masks, read from its relay by the caller before any
        activation checkpoint, so a recompute in backward uses the forward's selection;
        `given`: likewise, the engine's pools for this layer's indexer (given_picks)."""
        x_TD = enter_tp(x_TlD)
        tokens = x_TD.shape[0]
        q_resid_TR = self.q_layernorm(self.linear_q_down_proj(x_TD))
        q_THE = self.linear_q_up_proj(q_resid_TR).view(tokens, self.heads, self.qk_dim)
        kv_THF = self.linear_kv_up_proj(self.kv_layernorm(self.linear_kv_down_proj(x_TD))).view(tokens, self.heads, -1)
        k_THE, v_THE = kv_THF.split([self.qk_dim, self.v_dim], dim=-1)
        masks = relayed if self.indexer is None else self._masks(x_TD, q_resid_TR, packed, given)
        outs = [self._attend(q_THE[start:end], k_THE[start:end], v_THE[start:end], mask_SS)
                for (start, end), mask_SS in zip(packed.bounds, masks, strict=True)]
        return exit_tp(self.linear_proj(torch.cat(outs)))

    def _masks(self, x_TD, q_resid_TR, packed: Packed, given: tuple | None) -> tuple[torch.Tensor, ...]:
        """This layer's indexer: one boolean [S, S] mask per sequence (left in relay_out), over
        the engine's pools when `given` and the slot replays."""
        masks = []
        for sequence, (start, end) in enumerate(packed.bounds):
            picked_SK = self.indexer.picks(x_TD[start:end], q_resid_TR[start:end])
            if given is not None:
                picked_SK = self.indexer_slot.apply(self.indexer_index, sequence, picked_SK, given[sequence])
            masks.append(self.indexer.mask(picked_SK))
        masks = tuple(masks)
        if self.relay_out is not None:
            self.relay_out.masks = masks
        return masks
