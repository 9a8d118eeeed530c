"""Numbers that say whether two implementations of the model agree (tests and benchmarks).

`expected_lora_grads` uses the LoRA identity: with W' = W + s B A, dL/dB = s G A^T and
dL/dA = s B^T G, where G = dL/dW' is the reference model's full-weight gradient. So LoRA
gradients are checked against HF without an HF LoRA implementation for 3-D expert weights.
`LoraBGrads` applies the same identity one checkpoint tensor at a time, so a model whose
full-weight gradients do not fit beside it (the 4-layer slice in fp32) never holds them.

The parity criterion (issue 20): HF in fp32 is the reference; a bf16 implementation passes
when its KL to it is at most `KL_SLACK` x HF-bf16's own KL (single sequence and packed) and
its LoRA gradient cosine to the fp32 gradients is no lower than HF-bf16's. Routing agreement
is read with routers given trained-like top-k margins (`router_for_margin`): a random
router's near-ties re-route on any ulp, which would hide a real routing error.
Shape legend: T tokens, V vocabulary, E experts, D hidden, K top-k, R LoRA rank, I inputs.
"""
import torch

from model.megatron.mapping import compose, megatron_from_hf
from model.names import EXPERTS, name_table

KL_SLACK = 1.1
"""A bf16 implementation may sit this much above HF-bf16's KL to the fp32 reference."""


def kl_and_dlogp(ref_logits_TV: torch.Tensor, test_logits_TV: torch.Tensor, targets_T: torch.Tensor) -> dict[str, float]:
    """Mean KL(ref || test) per token, mean/max |log p(target)| difference, argmax agreement."""
    ref_TV = torch.log_softmax(ref_logits_TV.float(), -1)
    test_TV = torch.log_softmax(test_logits_TV.float(), -1)
    kl_T = (ref_TV.exp() * (ref_TV - test_TV)).sum(-1)
    dlogp_T = (ref_TV.gather(-1, targets_T[:, None]) - test_TV.gather(-1, targets_T[:, None])).abs().squeeze(-1)
    return {"kl_per_token": kl_T.mean().item(), "mean_abs_dlogp": dlogp_T.mean().item(),
            "max_abs_dlogp": dlogp_T.max().item(),
            "argmax_agree": (ref_TV.argmax(-1) == test_TV.argmax(-1)).float().mean().item()}


def expected_lora_grads(model: torch.nn.Module, hf_grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """{adapter param name: expected grad} for a TP=EP=1 model from HF full-weight grads."""
    full_G = megatron_from_hf(hf_grads, model.spec)
    expected = {}
    for name, module in model.named_modules():
        if not hasattr(module, "lora_A"):
            continue
        grad_W = full_G[f"{name}.weight"].float()
        a, b = module.lora_A.float(), module.lora_B.float()
        if getattr(module, "shared", False):
            expected[f"{name}.lora_B"] = module.scale * torch.einsum("eoi,ri->or", grad_W, a)
            expected[f"{name}.lora_A"] = module.scale * torch.einsum("or,eoi->ri", b, grad_W)
        else:
            expected[f"{name}.lora_B"] = module.scale * grad_W @ a.transpose(-1, -2)
            expected[f"{name}.lora_A"] = module.scale * b.transpose(-1, -2) @ grad_W
    return expected


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.flatten().double(), b.flatten().double()
    return (a @ b / (a.norm() * b.norm()).clamp_min(1e-30)).item()


def routing_agreement(ref_TK: torch.Tensor, test_TK: torch.Tensor) -> float:
    """Fraction of tokens whose top-k expert set (order ignored) equals the reference's."""
    same_T = (ref_TK.sort(-1).values == test_TK.sort(-1).values).all(-1)
    return same_T.float().mean().item()


def topk_margin_T(logits_TE: torch.Tensor, k: int) -> torch.Tensor:
    """k-th minus (k+1)-th largest router logit per token, in units of that token's logit std:
    scale-free, as a flip needs noise of that size relative to the logits' spread."""
    top_TK = logits_TE.float().topk(k + 1, dim=-1).values
    return (top_TK[:, k - 1] - top_TK[:, k]) / logits_TE.float().std(-1).clamp_min(1e-30)


def sharpen_router(weight_ED: torch.Tensor, x_TD: torch.Tensor, k: int, strength: float) -> torch.Tensor:
    """Each expert's row moved towards the mean input of the tokens it picks now, by
    `strength` x its own norm: what training does to a router, widening the margin of the
    choices tokens already make (experts no token picks keep their row)."""
    w_ED, x_TD = weight_ED.float(), x_TD.float()
    experts_TK = (x_TD @ w_ED.T).topk(k, dim=-1).indices
    sum_ED = torch.zeros_like(w_ED).index_add_(0, experts_TK.flatten(), x_TD.repeat_interleave(k, 0))
    unit_ED = sum_ED / sum_ED.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    return w_ED + strength * w_ED.norm(dim=-1, keepdim=True) * unit_ED


def router_for_margin(weight_ED: torch.Tensor, x_TD: torch.Tensor, k: int, target: float,
                      steps: int = 20) -> tuple[torch.Tensor, float]:
    """(sharpened router, its median top-k margin on x_TD): the `sharpen_router` strength
    found by bisection so the median `topk_margin_T` is `target` (weights unchanged when the
    margin already reaches it). The margin rises with the strength up to a few x the row
    norm and then saturates (the rows become the centroids), so the search stops at 64."""
    def median_margin(w_ED):
        return topk_margin_T(x_TD.float() @ w_ED.T, k).median().item()

    if median_margin(weight_ED.float()) >= target:
        return weight_ED.float(), median_margin(weight_ED.float())
    low, high = 0.0, 1.0
    while median_margin(sharpen_router(weight_ED, x_TD, k, high)) < target:
        low, high = high, 2 * high
        if high > 64:
            raise ValueError(f"no sharpening reaches a median top-{k} margin of {target}: choose a smaller one")
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (mid, high) if median_margin(sharpen_router(weight_ED, x_TD, k, mid)) < target else (low, mid)
    sharpened_ED = sharpen_router(weight_ED, x_TD, k, high)
    return sharpened_ED, median_margin(sharpened_ED)


def parity_verdicts(hf_bf16: dict[str, float], test: dict[str, float]) -> dict[str, bool]:
    """{criterion: passed} for a bf16 implementation against HF-bf16, both measured against
    the fp32 reference: keys kl_single, kl_packed (lower is better), lora_cosine (higher)."""
    return {"kl_single": test["kl_single"] <= KL_SLACK * hf_bf16["kl_single"],
            "kl_packed": test["kl_packed"] <= KL_SLACK * hf_bf16["kl_packed"],
            "lora_cosine": test["lora_cosine"] >= hf_bf16["lora_cosine"]}


def lora_rows(spec, targets: list[str]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """{Megatron module a LoRA adapts: (layout, checkpoint names of its weight)}."""
    return {mname.rsplit(".", 1)[0]: (kind, names) for mname, kind, names in name_table(spec)
            if mname.endswith(".weight") and mname.rsplit(".", 2)[-2] in targets}


def draw_lora_a(rows: dict, shapes: dict[str, torch.Size], experts: int, rank: int, expert_rank: int,
                seed: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """{module.lora_A: A_RI (A_ERI for experts)} ~ N(0, 1/I), rounded to the adapters' dtype
    and held in fp32, so the expectation and the model use the very same values."""
    gen = torch.Generator(device=device).manual_seed(seed)
    a_values = {}
    for module, (kind, names) in rows.items():
        inputs = shapes[names[0].format(e=0)][-1]
        lead = [experts, expert_rank] if kind == EXPERTS else [rank]
        a = torch.randn(*lead, inputs, generator=gen, device=device) * inputs ** -0.5
        a_values[f"{module}.lora_A"] = a.to(dtype).float()
    return a_values


class LoraBGrads:
    """dL/dB = s G A^T (lora_B = 0), summed one checkpoint gradient at a time: a Megatron
    weight is a row concatenation of checkpoint tensors (stacked per expert), and rows
    commute with G @ A^T, so each part's product is kept and the parts composed at the end."""

    def __init__(self, rows: dict, a_values: dict[str, torch.Tensor], scales: dict[str, float], experts: int):
        self.a_values, self.scales, self.experts = a_values, scales, experts
        self.part_of = {}
        """{checkpoint name: (module, expert or None)} for every tensor an adapted weight is made of."""
        for module, (kind, names) in rows.items():
            for e in range(experts) if kind == EXPERTS else [None]:
                self.part_of.update({n.format(e=e): (module, e) for n in names})
        self.rows, self.parts = rows, {}

    def module_of(self, name: str) -> str | None:
        """The adapted module a checkpoint tensor belongs to (None: not adapted)."""
        return self.part_of[name][0] if name in self.part_of else None

    def add(self, name: str, grad_OI: torch.Tensor) -> None:
        """Take one checkpoint-named gradient (ignored unless an adapted weight uses it)."""
        if name not in self.part_of:
            return
        module, e = self.part_of[name]
        a_RI = self.a_values[f"{module}.lora_A"]
        self.add_product(name, grad_OI.float() @ (a_RI if e is None else a_RI[e]).T)

    def add_product(self, name: str, product_OR: torch.Tensor) -> None:
        """Take G A^T of one checkpoint tensor, formed by the caller (`expert_product`)."""
        self.parts[name] = self.scales[self.part_of[name][0]] * product_OR

    def expert_product(self, module: str, grad_EOI: torch.Tensor, experts_per_chunk: int = 16) -> torch.Tensor:
        """G A^T of a whole stacked expert gradient [E, O, I] -> [E, O, R] in fp32, a few
        experts at a time: a bf16 expert gradient (9 GiB for one layer's gate|up on the
        4-layer slice) is never copied to fp32 whole, nor split into per-expert copies."""
        a_ERI = self.a_values[f"{module}.lora_A"]
        return torch.cat([grad_EOI[i:i + experts_per_chunk].float() @ a_ERI[i:i + experts_per_chunk].transpose(-1, -2)
                          for i in range(0, grad_EOI.shape[0], experts_per_chunk)])

    def b_grads(self) -> dict[str, torch.Tensor]:
        """{module.lora_B: expected grad}; every part must have been given (a silently zero
        part would pass for a gradient that never arrived)."""
        missing = sorted(set(self.part_of) - set(self.parts))
        if missing:
            raise KeyError(f"no gradient was given for {len(missing)} adapted tensors, e.g. {missing[:3]}")
        return {f"{module}.lora_B": compose(kind, names, self.parts, self.experts)
                for module, (kind, names) in self.rows.items()}
