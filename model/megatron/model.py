"""GLM-5.3-Flash language model for megatron-core 0.19.2 (no TransformerEngine).

embedding -> expand to hc_mult streams -> decoder layers -> mean of streams -> norm ->
vocab-parallel output layer. Input is one packed token stream (every TP rank gets all of
it); between layers each TP rank keeps T/tp tokens (sequence parallel). The output is this
rank's vocabulary slice of the logits; `token_logprobs` turns it into log p(target)
with Megatron's vocab-parallel cross entropy, without gathering the vocabulary.
Shape legend: T tokens, Tl local tokens, N streams, D hidden, Vl local vocabulary.
"""
import torch
import torch.nn.functional as F
from megatron.core import parallel_state as ps
from megatron.core.tensor_parallel import vocab_parallel_cross_entropy
from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes
from torch.utils.checkpoint import checkpoint

from model.megatron.comm import gather_last_dim, reduce_scatter_tokens
from model.megatron.dsa import TopkRelay
from model.megatron.layer import DecoderLayer
from model.megatron.mhc import contract_streams, expand_streams
from model.megatron.packing import Packed
from model.megatron.parallel import enter_tp, split_size, tp_rank, tp_size
from model.megatron.rmsnorm import RMSNorm
from model.megatron.spec import ModelSpec


def _vocab_param(spec: ModelSpec) -> torch.nn.Parameter:
    rows = split_size(spec.vocab_size, tp_size(), "vocab_size")
    param = torch.nn.Parameter(torch.empty(rows, spec.hidden_size, dtype=spec.dtype))
    set_tensor_model_parallel_attributes(param, tp_size() > 1, 0, 1)
    return param


class GlmModel(torch.nn.Module):
    def __init__(self, spec: ModelSpec, recompute_layers: bool = False, recompute_modules: frozenset[str] = frozenset()):
        super().__init__()
        self.spec = spec
        self.recompute_layers = recompute_layers
        self.word_embeddings = _vocab_param(spec)
        self.layers = torch.nn.ModuleList(DecoderLayer(spec, i, recompute_modules) for i in range(spec.num_hidden_layers))
        self._link_shared_indexers()
        self.final_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, spec.dtype)
        self.output_layer = _vocab_param(spec)

    def _link_shared_indexers(self) -> None:
        """A shared indexer layer reads the masks of the full one right before it
        (ModelSpec.from_arch has checked that it is one)."""
        for i, kind in enumerate(self.spec.indexer_types):
            if kind == "shared" and self.spec.layer_types[i] == "indexed_attention":
                relay = TopkRelay()
                self.layers[i - 1].self_attention.relay_out = relay
                self.layers[i].self_attention.relay_in = relay

    def embed(self, ids_T: torch.Tensor) -> torch.Tensor:
        """This rank's T/tp tokens of the embedding (vocab-parallel lookup, summed over TP).

        The pad row gets no gradient, as HF's padding_idx embedding.
        """
        rows = self.word_embeddings.shape[0]
        first = tp_rank() * rows
        pad = self.spec.pad_token_id
        local_pad = pad - first if pad is not None and first <= pad < first + rows else None
        if tp_size() == 1:
            return F.embedding(ids_T, self.word_embeddings, padding_idx=local_pad)
        local_T = ids_T - first
        outside_T = (local_T < 0) | (local_T >= rows)
        emb_TD = F.embedding(local_T.masked_fill(outside_T, 0), self.word_embeddings, padding_idx=local_pad)
        return reduce_scatter_tokens(emb_TD.masked_fill(outside_T.unsqueeze(-1), 0), ps.get_tensor_model_parallel_group())

    def _run_layer(self, layer: DecoderLayer, streams_TND: torch.Tensor, packed: Packed) -> torch.Tensor:
        relayed, given = layer.relayed_masks(), layer.given_picks(packed)
        if self.recompute_layers and torch.is_grad_enabled():
            return checkpoint(layer, streams_TND, packed, relayed, given, use_reentrant=False)
        return layer(streams_TND, packed, relayed, given)

    def forward(self, ids_T: torch.Tensor, packed: Packed) -> torch.Tensor:
        """Logits over this rank's vocabulary slice, [T, Vl] (T = all tokens of the stream)."""
        streams_TND = expand_streams(self.embed(ids_T), self.spec.hc_mult)
        for layer in self.layers:
            streams_TND = self._run_layer(layer, streams_TND, packed)
        hidden_TlD = self.final_layernorm(contract_streams(streams_TND))
        return F.linear(enter_tp(hidden_TlD), self.output_layer)


def token_logprobs(logits_TVl: torch.Tensor, targets_T: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log p(targets_T[t] | tokens <= t) under softmax(logits / temperature), fp32."""
    return -vocab_parallel_cross_entropy(logits_TVl.float() / temperature, targets_T)


def full_logits(logits_TVl: torch.Tensor) -> torch.Tensor:
    """All-gather the vocabulary (tests and small models only: [T, V] on every rank)."""
    return gather_last_dim(logits_TVl, ps.get_tensor_model_parallel_group())
