"""One GLM-5.3-Flash decoder layer: (KDA | sparse MLA) then (dense MLP | MoE), each
wrapped in its own mHC hyper-connection instead of a plain residual add. Selective
recompute (trainer.recompute.modules) re-runs the token mixer (`core_attn`) and/or the MLP
(`moe`, `mlp`) in backward; the mHC and norms are cheap and always kept.

The mHC update is applied around every sub-layer, so a MoE MLP needs nothing special:
the collapsed [T, D] input goes through it like through a dense MLP.
Shape legend: Tl local tokens, N streams, D hidden.
"""
import torch
from torch.utils.checkpoint import checkpoint

from model.megatron.dsa import SparseMLA
from model.megatron.kda import KDAttention
from model.megatron.mhc import HyperConnection, hc_merge
from model.megatron.mlp import SwiGLUMLP
from model.megatron.moe import MoE
from model.megatron.packing import Packed
from model.megatron.rmsnorm import RMSNorm
from model.megatron.spec import ModelSpec


class DecoderLayer(torch.nn.Module):
    def __init__(self, spec: ModelSpec, index: int, recompute: frozenset[str] = frozenset()):
        super().__init__()
        self.recompute = recompute
        is_kda = spec.layer_types[index] == "linear_attention"
        self.self_attention = KDAttention(spec) if is_kda else SparseMLA(spec, index)
        if spec.mlp_layer_types[index] == "sparse":
            self.mlp = MoE(spec)
        else:
            self.mlp = SwiGLUMLP(spec.hidden_size, spec.intermediate_size, spec.swiglu_limit, spec.dtype)
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, spec.dtype)
        self.pre_mlp_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, spec.dtype)
        self.attn_hc = HyperConnection(spec)
        self.ffn_hc = HyperConnection(spec)

    def _maybe_recompute(self, names: set[str], module, *args):
        """Selective recompute: keep only the module's input, redo it in backward."""
        if self.recompute & names and torch.is_grad_enabled():
            return checkpoint(module, *args, use_reentrant=False)
        return module(*args)

    def relayed_masks(self) -> tuple | None:
        """A shared indexer layer's masks as its full neighbour left them (else None)."""
        relay = getattr(self.self_attention, "relay_in", None)
        return relay.masks if relay is not None else None

    def given_picks(self, packed: Packed) -> tuple | None:
        """The engine's indexer pools for this layer (DSA top-k replay; else None)."""
        attention = self.self_attention
        return attention.given_picks(packed) if isinstance(attention, SparseMLA) else None

    def forward(self, streams_TND: torch.Tensor, packed: Packed, relayed: tuple | None = None,
                given: tuple | None = None) -> torch.Tensor:
        post, comb, x_TD = self.attn_hc(streams_TND)
        extra = () if relayed is None and given is None else (relayed, given)
        attn_TD = self._maybe_recompute({"core_attn"}, self.self_attention, self.input_layernorm(x_TD), packed, *extra)
        streams_TND = hc_merge(post, comb, attn_TD, streams_TND)
        post, comb, x_TD = self.ffn_hc(streams_TND)
        mlp_TD = self._maybe_recompute({"moe", "mlp"}, self.mlp, self.pre_mlp_layernorm(x_TD))
        return hc_merge(post, comb, mlp_TD, streams_TND)
