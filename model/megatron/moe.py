"""GLM-5.3-Flash's MoE block: sigmoid router with an expert-bias (routing only), top-k
probabilities renormalised and scaled, grouped routed experts, one shared expert.

Routing uses megatron-core's topk_routing_with_score_function (the same sigmoid + bias +
scaling HF glm5_next does). Expert parallelism: tokens (and their routing) are all-gathered
over the expert-model-parallel group (EP x ETP ranks); each rank runs its own experts (its
ETP slice of their width) on the tokens routed to them, and a reduce-scatter sums the
partial outputs back to each rank's tokens. This is Megatron's all-gather dispatcher
scheme: exact for any EP/ETP, simpler than all-to-all, more traffic at large EP. The top-k
expert outputs are summed in fp32 and rounded once (as HF's grouped_mm path does).
Shape legend: T tokens, A token-expert assignments, K top-k, E local experts, D hidden.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core import parallel_state as ps
from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function

from model.megatron.comm import gather_tokens, reduce_scatter_tokens
from model.megatron.fused import fused
from model.megatron.grouped import GroupedLinear
from model.megatron.mlp import SwiGLUMLP, clamped_swiglu
from model.megatron.parallel import mark_duplicated, split_size
from model.megatron.spec import ModelSpec


def expert_group():
    return ps.get_expert_tensor_and_model_parallel_group()


class RoutedExperts(torch.nn.Module):
    """This rank's experts: [first, first + E) of all, each holding 1/ETP of its width."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        ep, etp = ps.get_expert_model_parallel_world_size(), ps.get_expert_tensor_parallel_world_size()
        self.local_experts = split_size(spec.n_routed_experts, ep, "n_routed_experts")
        self.first = ps.get_expert_model_parallel_rank() * self.local_experts
        width = split_size(spec.moe_intermediate_size, etp, "moe_intermediate_size")
        self.limit = spec.swiglu_limit
        self.linear_fc1 = GroupedLinear(self.local_experts, spec.hidden_size, 2 * width, spec.dtype, etp_dim=1, stride=2)
        self.linear_fc2 = GroupedLinear(self.local_experts, width, spec.hidden_size, spec.dtype, etp_dim=2)

    def forward(self, x_TD: torch.Tensor, probs_TK: torch.Tensor, experts_TK: torch.Tensor,
                all_local: bool = True) -> torch.Tensor:
        """`all_local`: every assignment goes to one of this rank's experts (no expert
        parallelism, no padding rows): they are taken without a boolean mask, whose
        data-dependent size would make the host wait for the GPU."""
        local_TK = experts_TK - self.first
        token_TK = torch.arange(x_TD.shape[0], device=x_TD.device).unsqueeze(-1).expand_as(local_TK)
        if all_local:
            token_A, expert_A, prob_A = token_TK.flatten(), local_TK.flatten(), probs_TK.flatten()
        else:
            mine_TK = (local_TK >= 0) & (local_TK < self.local_experts)
            token_A, expert_A, prob_A = token_TK[mine_TK], local_TK[mine_TK], probs_TK[mine_TK]
        order_A = torch.argsort(expert_A, stable=True)
        token_A, expert_A, prob_A = token_A[order_A], expert_A[order_A], prob_A[order_A]
        counts_E = torch.zeros(self.local_experts, dtype=torch.long, device=x_TD.device)
        counts_E.scatter_add_(0, expert_A, torch.ones_like(expert_A))
        hidden_AF = clamped_swiglu(self.linear_fc1(x_TD[token_A], counts_E), self.limit)
        return WeightedCombine.apply(self.linear_fc2(hidden_AF, counts_E), prob_A, token_A, x_TD.shape[0])


@fused
def _combine(y_AD: torch.Tensor, prob_A: torch.Tensor, token_A: torch.Tensor, out_TD: torch.Tensor) -> torch.Tensor:
    return out_TD.index_add(0, token_A, y_AD.float() * prob_A.unsqueeze(-1))


@fused
def _combine_grad(grad_TD: torch.Tensor, y_AD: torch.Tensor, prob_A: torch.Tensor, token_A: torch.Tensor):
    grad_AD = grad_TD.index_select(0, token_A)
    return (grad_AD * prob_A.unsqueeze(-1)).to(y_AD.dtype), (grad_AD * y_AD.float()).sum(-1)


class WeightedCombine(torch.autograd.Function):
    """out[t] = sum of prob[a] * y[a] over token t's assignments a, accumulated in fp32.

    Autograd through `y * prob` then index_add_ would keep the fp32 product for backward
    (4 B x top-k x hidden per token and MoE layer, 1.6 GiB over the 4-layer slice's 4096
    tokens); this keeps y in its own dtype and forms the product again in backward.
    """

    @staticmethod
    def forward(ctx, y_AD: torch.Tensor, prob_A: torch.Tensor, token_A: torch.Tensor, tokens: int) -> torch.Tensor:
        ctx.save_for_backward(y_AD, prob_A, token_A)
        out_TD = torch.zeros(tokens, y_AD.shape[1], dtype=torch.float32, device=y_AD.device)
        return _combine(y_AD, prob_A, token_A, out_TD)

    @staticmethod
    def backward(ctx, grad_TD: torch.Tensor):
        y_AD, prob_A, token_A = ctx.saved_tensors
        grad_y, grad_prob = _combine_grad(grad_TD, y_AD, prob_A, token_A)
        return grad_y, grad_prob, None, None


class MoE(torch.nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.topk, self.scaling = spec.num_experts_per_tok, spec.routed_scaling_factor
        self.router_weight = mark_duplicated(torch.nn.Parameter(torch.zeros(spec.n_routed_experts, spec.hidden_size)))
        self.register_buffer("expert_bias", torch.zeros(spec.n_routed_experts))
        self.experts = RoutedExperts(spec)
        shared_width = spec.moe_intermediate_size * spec.n_shared_experts
        self.shared_experts = SwiGLUMLP(spec.hidden_size, shared_width, spec.swiglu_limit, spec.dtype)
        self.moe_index = -1
        """This block's position among the model's MoE layers (the engine's routes' L axis)."""
        self.route_slot = None
        """A routes.RouteSlot when the trainer replays or compares the engine's routes."""

    def route(self, x_TD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(probs_TK fp32, experts_TK): sigmoid scores, bias only for choosing, renormalised, scaled."""
        logits_TE = torch.nn.functional.linear(x_TD.float(), self.router_weight.float())
        probs_TK, experts_TK = topk_routing_with_score_function(logits_TE, self.topk, scaling_factor=self.scaling,
                                                                score_function="sigmoid", expert_bias=self.expert_bias,
                                                                dense_output=True)
        slot = self.route_slot
        if slot is None or slot.given_TLK is None:
            return probs_TK, experts_TK
        return slot.apply(self, logits_TE, probs_TK, experts_TK)  # routing replay (model/megatron/routes.py)

    def forward(self, x_TlD: torch.Tensor) -> torch.Tensor:
        probs_TK, experts_TK = self.route(x_TlD)
        group = expert_group()
        if group.size() == 1:
            routed_TD = self.experts(x_TlD, probs_TK, experts_TK)
        else:
            routed_TD = self._across_group(x_TlD, probs_TK, experts_TK, group)
        return routed_TD.to(x_TlD.dtype) + self.shared_experts(x_TlD)

    def _across_group(self, x_TD, probs_TK, experts_TK, group) -> torch.Tensor:
        """Gather every rank's tokens, run the local experts, reduce-scatter back.

        Ranks of different data-parallel replicas hold different token counts: every rank
        pads to the group's largest count with rows routed to no expert (index -1).
        """
        count = torch.tensor([x_TD.shape[0]], device=x_TD.device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX, group=group)
        pad = int(count.item()) - x_TD.shape[0]
        x_TD, probs_TK = F.pad(x_TD, (0, 0, 0, pad)), F.pad(probs_TK, (0, 0, 0, pad))
        experts_TK = F.pad(experts_TK, (0, 0, 0, pad), value=-1)
        routed_TD = self.experts(gather_tokens(x_TD, group), gather_tokens(probs_TK, group),
                                 gather_tokens(experts_TK, group), all_local=False)
        return reduce_scatter_tokens(routed_TD, group)[: x_TD.shape[0] - pad]
