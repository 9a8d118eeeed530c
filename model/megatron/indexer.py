"""The DSA k-pool indexer of GLM-5.3-Flash, one sequence at a time.

Keys are pooled in groups of `index_kpool` tokens (a per-channel softmax over each pool's
slots of gate_score + position embedding weights the keys); each query scores the complete
pools it can see and keeps the best index_topk / kpool of them, plus (optionally) its own
incomplete tail pool token by token. So sequences longer than index_topk select pools
instead of being refused. Runs under no_grad like HF's (the indexer gets no gradient);
it is duplicated on every TP rank. Matches HF Glm5NextTextIndexer for unpadded input.
Shape legend: S tokens of one sequence, P complete pools, J heads, E head width, D hidden.
"""
import torch
import torch.nn.functional as F

from model.megatron.parallel import ShardedLinear, mark_duplicated
from model.megatron.spec import ModelSpec


class KPoolIndexer(torch.nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        dtype, heads, dim = spec.dtype, spec.index_n_heads, spec.index_head_dim
        self.heads, self.dim, self.kpool, self.topk = heads, dim, spec.index_kpool, spec.index_topk
        self.select_tail = spec.index_kpool_always_select_tail
        self.linear_wq_b = ShardedLinear(spec.q_lora_rank, heads * dim, "duplicated", dtype)
        self.linear_wk = ShardedLinear(spec.hidden_size, dim, "duplicated", dtype)
        self.k_norm = torch.nn.LayerNorm(dim, eps=1e-6, dtype=dtype)
        for param in self.k_norm.parameters():
            mark_duplicated(param)
        self.linear_weights_proj = ShardedLinear(spec.hidden_size, heads, "duplicated", dtype)
        self.kpool_ape = mark_duplicated(torch.nn.Parameter(torch.zeros(self.kpool, dim, dtype=dtype)))
        self.kpool_gate = mark_duplicated(torch.nn.Parameter(torch.ones(dim, spec.hidden_size, dtype=dtype)))

    def _pool_keys(self, x_SD: torch.Tensor) -> torch.Tensor:
        """Softmax-weighted key of every complete pool, [P, E]."""
        pools = x_SD.shape[0] // self.kpool
        keys_SE = self.k_norm(self.linear_wk(x_SD))[: pools * self.kpool]
        gate_SE = F.linear(x_SD, self.kpool_gate)[: pools * self.kpool]
        # Explicit widths: a sequence shorter than a pool (SP's pad sequence) has 0 pools, where -1 is ambiguous.
        logits_PKE = gate_SE.view(pools, self.kpool, self.dim).float() + self.kpool_ape.float()
        probs_PKE = logits_PKE.softmax(dim=1).to(keys_SE.dtype)
        return (probs_PKE * keys_SE.view(pools, self.kpool, self.dim)).sum(dim=1)

    def _pool_scores(self, x_SD: torch.Tensor, q_resid_SR: torch.Tensor) -> torch.Tensor:
        """Weighted sum over heads of relu(q . pool_key * scale), [S, P]."""
        q_SJE = self.linear_wq_b(q_resid_SR).view(x_SD.shape[0], self.heads, self.dim)
        scores_SJP = torch.matmul(q_SJE.float(), self._pool_keys(x_SD).transpose(-1, -2).float())
        scores_SJP = F.relu(scores_SJP * self.dim ** -0.5)
        weights_SJ = self.linear_weights_proj(x_SD).float() * self.heads ** -0.5
        return torch.matmul(weights_SJ.unsqueeze(-2), scores_SJP).squeeze(-2)

    @torch.no_grad()
    def picks(self, x_SD: torch.Tensor, q_resid_SR: torch.Tensor) -> torch.Tensor:
        """The pools each query keeps, [S, K] (K = index_topk // kpool, best first), -1 where
        fewer than K complete pools are visible: what the engine's indexer returns and
        replay gives back (model/megatron/indexer_slot.py)."""
        seq, budget = x_SD.shape[0], self.topk // self.kpool
        query_S1 = torch.arange(seq, device=x_SD.device).unsqueeze(-1)
        pool_end_P = torch.arange(seq // self.kpool, device=x_SD.device) * self.kpool + self.kpool - 1
        visible_SP = pool_end_P.unsqueeze(0) <= query_S1
        scores_SP = self._pool_scores(x_SD, q_resid_SR).masked_fill(~visible_SP, torch.finfo(torch.float32).min)
        chosen = min(budget, scores_SP.shape[-1])
        picked_SK = scores_SP.topk(chosen, dim=-1).indices
        picked_SK = picked_SK.masked_fill(~visible_SP.gather(-1, picked_SK), -1)
        return F.pad(picked_SK, (0, budget - chosen), value=-1)

    @torch.no_grad()
    def mask(self, picked_SK: torch.Tensor) -> torch.Tensor:
        """Boolean [S, S] mask: query s may attend key t (a token of a picked pool, or of its own tail)."""
        seq, device = picked_SK.shape[0], picked_SK.device
        pools = seq // self.kpool
        picked_SK = picked_SK.masked_fill(picked_SK < 0, pools)
        chosen_SP = torch.zeros(seq, pools + 1, dtype=torch.bool, device=device).scatter_(1, picked_SK, True)
        chosen_SP[:, pools] = False
        pool_of_T = (torch.arange(seq, device=device) // self.kpool).clamp(max=pools)
        in_picked_ST = chosen_SP[:, pool_of_T]
        if self.select_tail:
            query_S1 = torch.arange(seq, device=device).unsqueeze(-1)
            tail_start_S1 = (query_S1 + 1) - (query_S1 + 1) % self.kpool
            key_1T = torch.arange(seq, device=device).unsqueeze(0)
            in_picked_ST |= (key_1T >= tail_start_S1) & (key_1T <= query_S1)
        return in_picked_ST

    def forward(self, x_SD: torch.Tensor, q_resid_SR: torch.Tensor) -> torch.Tensor:
        """Boolean [S, S] mask of the indexer's own picks."""
        return self.mask(self.picks(x_SD, q_resid_SR))
