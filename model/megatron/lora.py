"""LoRA on the Megatron model: dense/attention linears and routed experts.

An adapted module keeps its frozen `weight` under the same name and adds `lora_A`/`lora_B`,
so HF mapping, export and checkpoints still see the base weight where they expect it.
Sharding follows the base: column-parallel -> B split, A duplicated; row-parallel -> A
split, B duplicated (duplicated adapters get partial grads, summed over TP like norms).
Routed experts get one adapter per expert (stored like expert weights: split over EP), or
one adapter shared by the layer's experts; normalize_moe_lora divides their rank by top-k.
Per-expert adapters follow the expert weight's ETP split the same way (fc1's B split with
its gate|up stride, fc2's A split); the ETP-duplicated half gets partial grads, which
optim.sum_etp_duplicated_grads adds up over the ETP group.
A shared adapter is a dense, duplicated weight: with EP each rank's grad covers its own
experts' tokens, and the data-parallel reduction (which spans the EP ranks) sums them.
Shared adapters need etp = 1 (rule LORA008): an ETP-split half would be summed with its neighbours' slices.
Shape legend: A tokens (or assignments), G local experts, R rank, I input, O output.
"""
import torch
import torch.nn.functional as F
from megatron.core import parallel_state as ps
from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

from model.megatron.grouped import GroupedLinear, grouped_matmul
from model.megatron.parallel import ShardedLinear, mark_duplicated


def _adapter(like: torch.Tensor, shape: tuple[int, ...], split_dim: int | None, std: float) -> torch.nn.Parameter:
    """A split adapter keeps the base's partition stride: fc1's B rows are [gate_r; up_r] on
    rank r like its base's, so gathering it with stride 1 would interleave gate and up."""
    values = torch.randn(shape, dtype=torch.float32, device=like.device).mul_(std)
    param = torch.nn.Parameter(values.to(like.dtype))
    if split_dim is None:
        return mark_duplicated(param)
    set_tensor_model_parallel_attributes(param, True, split_dim, getattr(like, "partition_stride", 1))
    return param


class LoraLinear(torch.nn.Module):
    """base(x) + scale * B(A(x)) around a ShardedLinear; B starts at zero (output unchanged)."""

    def __init__(self, base: ShardedLinear, rank: int, alpha: float):
        super().__init__()
        out_local, in_local = base.weight.shape
        self.mode, self.weight, self.scale = base.mode, base.weight, alpha / rank
        self.weight.requires_grad_(False)
        self.lora_A = _adapter(base.weight, (rank, in_local), 1 if base.mode == "row" else None, in_local ** -0.5)
        self.lora_B = _adapter(base.weight, (out_local, rank), 0 if base.mode == "column" else None, 0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight) + self.scale * F.linear(F.linear(x, self.lora_A), self.lora_B)

    def merged_weight(self) -> torch.Tensor:
        return self.weight + (self.scale * self.lora_B.float() @ self.lora_A.float()).to(self.weight.dtype)


MERGE_EXPERTS_PER_CHUNK = 8
"""Experts merged per matmul in LoraGrouped.merged_weight (~0.75 GiB of fp32 for GLM's fc1)."""


class LoraGrouped(torch.nn.Module):
    """GroupedLinear + adapters: per expert ([G, R, I], [G, O, R]) or one shared pair."""

    def __init__(self, base: GroupedLinear, rank: int, alpha: float, shared: bool):
        super().__init__()
        experts, out_f, in_f = base.weight.shape
        self.weight, self.scale, self.shared = base.weight, alpha / rank, shared
        self.weight.requires_grad_(False)
        lead = () if shared else (experts,)
        device, dtype = base.weight.device, base.weight.dtype
        self.lora_A = torch.nn.Parameter(torch.randn(*lead, rank, in_f, device=device).mul_(in_f ** -0.5).to(dtype))
        self.lora_B = torch.nn.Parameter(torch.zeros(*lead, out_f, rank, device=device, dtype=dtype))
        if shared:
            mark_duplicated(self.lora_A)
            mark_duplicated(self.lora_B)
        else:
            self._follow_expert_split(base.weight)

    def _follow_expert_split(self, base_weight: torch.Tensor) -> None:
        """Split B like an output-split base (fc1) or A like an input-split one (fc2); the
        other adapter is whole on every ETP rank."""
        split, duplicated = (self.lora_B, self.lora_A) if base_weight.partition_dim == 1 else (self.lora_A, self.lora_B)
        etp_split = ps.get_expert_tensor_parallel_world_size() > 1
        set_tensor_model_parallel_attributes(split, etp_split, base_weight.partition_dim, base_weight.partition_stride)
        duplicated.etp_duplicated = etp_split
        self.lora_A.allreduce = self.lora_B.allreduce = False

    def forward(self, x_AI: torch.Tensor, counts_G: torch.Tensor) -> torch.Tensor:
        base_AO = grouped_matmul(x_AI, self.weight, counts_G)
        if self.shared:
            return base_AO + self.scale * F.linear(F.linear(x_AI, self.lora_A), self.lora_B)
        low_AR = grouped_matmul(x_AI, self.lora_A, counts_G)
        return base_AO + self.scale * grouped_matmul(low_AR, self.lora_B, counts_G)

    def merged_expert(self, expert: int) -> torch.Tensor:
        """weight[expert] + scale * B @ A for one expert, in the weight's dtype: the merged sync
        streams experts one at a time from here when this rank holds the whole stack
        (model/megatron/weights.py hf_stream), so no copy of a layer's stack is ever made."""
        lora_A, lora_B = (self.lora_A, self.lora_B) if self.shared else (self.lora_A[expert], self.lora_B[expert])
        return self.weight[expert] + (self.scale * torch.matmul(lora_B.float(), lora_A.float())).to(self.weight.dtype)

    def merged_weight(self) -> torch.Tensor:
        """weight + scale * B @ A, a few experts at a time: the fp32 product of a whole layer's
        experts (27 GiB for the 4-layer slice's fc1, 288 x 4096 x 6144) beside its bf16 copies
        took the trainer from 50 to 86 GiB in the first sync, and the engine on the same H200
        ran out of memory. A copy of the whole stack: only for a stack split over ranks, which
        must be gathered whole."""
        merged = self.weight.clone()
        for start in range(0, merged.shape[0], MERGE_EXPERTS_PER_CHUNK):
            chunk = slice(start, start + MERGE_EXPERTS_PER_CHUNK)
            lora_A, lora_B = (self.lora_A, self.lora_B) if self.shared else (self.lora_A[chunk], self.lora_B[chunk])
            merged[chunk] += (self.scale * torch.matmul(lora_B.float(), lora_A.float())).to(merged.dtype)
        return merged


def apply_lora(model: torch.nn.Module, targets: list[str], rank: int, alpha: float,
               share_expert_adapters: bool = False, expert_rank: int | None = None) -> list[str]:
    """Freeze the model and wrap every targeted linear; returns the adapted module names.
    `expert_rank`: the routed experts' rank (the plan's lora.expert_rank; default `rank`)."""
    for param in model.parameters():
        param.requires_grad_(False)
    expert_rank = rank if expert_rank is None else expert_rank
    adapted = []
    for name, module in list(model.named_modules()):
        leaf = name.rsplit(".", 1)[-1]
        if leaf not in targets:
            continue
        parent = model.get_submodule(name.rsplit(".", 1)[0])
        if isinstance(module, GroupedLinear):
            setattr(parent, leaf, LoraGrouped(module, expert_rank, alpha, share_expert_adapters))
        elif isinstance(module, ShardedLinear):
            setattr(parent, leaf, LoraLinear(module, rank, alpha))
        else:
            continue
        adapted.append(name)
    return adapted
