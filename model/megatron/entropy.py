"""Per-token entropy of softmax(logits / temperature) over a vocabulary split across TP.

H = log Z - sum_v p_v z_v, with the max, Z and the p.z sum reduced over TP ranks; the
sums are differentiable all-reduces (entropy bonuses need the gradient).
Shape legend: T tokens, Vl local vocabulary.
"""
import torch
import torch.distributed as dist
from megatron.core import parallel_state as ps

from model.megatron.comm import all_reduce_sum
from model.megatron.parallel import tp_size


def token_entropy(logits_TVl: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    z_TV = logits_TVl.float() / temperature
    max_T = z_TV.max(-1).values.detach()
    if tp_size() > 1:
        dist.all_reduce(max_T, op=dist.ReduceOp.MAX, group=ps.get_tensor_model_parallel_group())
    exp_TV = torch.exp(z_TV - max_T.unsqueeze(-1))
    local_sum_T, local_dot_T = exp_TV.sum(-1), (exp_TV * z_TV).sum(-1)
    if tp_size() > 1:
        group = ps.get_tensor_model_parallel_group()
        local_sum_T, local_dot_T = all_reduce_sum(local_sum_T, group), all_reduce_sum(local_dot_T, group)
    return torch.log(local_sum_T) + max_T - local_dot_T / local_sum_T
