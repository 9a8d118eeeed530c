"""Numbers that say whether two implementations of the model agree (tests and benchmarks).

`expected_lora_grads` uses the LoRA identity: with W' = W + s B A, dL/dB = s G A^T and
dL/dA = s B^T G, where G = dL/dW' is the reference model's full-weight gradient. So LoRA
gradients are checked against HF without an HF LoRA implementation for 3-D expert weights.
Shape legend: T tokens, V vocabulary.
"""
import torch

from model.megatron.mapping import megatron_from_hf


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
