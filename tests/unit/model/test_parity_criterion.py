"""The fp32-reference parity helpers on hand-sized tensors: routing agreement,
top-k margins and the router sharpening that sets them, the pass/fail criterion, and the
streamed LoRA B-gradient expectation against the whole-weight formula."""
from types import SimpleNamespace

import pytest
import torch

from device.harness.parity import (
    LoraBGrads,
    draw_lora_a,
    lora_rows,
    parity_verdicts,
    router_for_margin,
    routing_agreement,
    topk_margin_T,
)
from model.megatron.mapping import compose


def test_routing_agreement_counts_sets_not_order():
    ref_TK = torch.tensor([[0, 1], [2, 3], [1, 0]])
    test_TK = torch.tensor([[1, 0], [2, 4], [0, 1]])
    assert routing_agreement(ref_TK, test_TK) == pytest.approx(2 / 3)


def test_topk_margin_is_the_kth_gap_over_the_token_std():
    logits_TE = torch.tensor([[4.0, 3.0, 1.0, 0.0]])
    want = (3.0 - 1.0) / logits_TE.std().item()
    assert topk_margin_T(logits_TE, k=2).item() == pytest.approx(want)


def test_router_for_margin_widens_a_random_router_to_the_target():
    gen = torch.Generator().manual_seed(0)
    x_TD, w_ED = torch.randn(128, 128, generator=gen), torch.randn(32, 128, generator=gen) * 0.02
    before = topk_margin_T(x_TD @ w_ED.T, 4).median().item()
    sharpened_ED, got = router_for_margin(w_ED, x_TD, k=4, target=0.5)
    assert before < 0.2
    assert got == pytest.approx(0.5, abs=0.01)
    assert topk_margin_T(x_TD @ sharpened_ED.T, 4).median().item() == pytest.approx(got)
    with pytest.raises(ValueError, match="smaller"):
        router_for_margin(w_ED, x_TD, k=4, target=50.0)


def test_verdicts_allow_ten_percent_more_kl_and_no_lower_cosine():
    hf = {"kl_single": 0.010, "kl_packed": 0.020, "lora_cosine": 0.990}
    assert all(parity_verdicts(hf, {"kl_single": 0.0109, "kl_packed": 0.0219, "lora_cosine": 0.990}).values())
    failed = parity_verdicts(hf, {"kl_single": 0.0111, "kl_packed": 0.0221, "lora_cosine": 0.989})
    assert failed == {"kl_single": False, "kl_packed": False, "lora_cosine": False}


def _one_moe_layer_spec():
    return SimpleNamespace(num_hidden_layers=1, layer_types=["linear_attention"], mlp_layer_types=["sparse"],
                           indexer_types=["full"], n_routed_experts=2)


def test_streamed_b_grads_equal_s_g_at_on_the_composed_weight():
    spec, experts = _one_moe_layer_spec(), 2
    rows = lora_rows(spec, ["linear_fc1", "o_proj"])
    assert set(rows) == {"layers.0.mlp.experts.linear_fc1", "layers.0.mlp.shared_experts.linear_fc1",
                         "layers.0.self_attention.o_proj"}
    gen = torch.Generator().manual_seed(1)
    shapes = {n.format(e=e): torch.Size([3, 5]) for kind, names in rows.values() for n in names for e in range(experts)}
    grads = {n: torch.randn(s, generator=gen) for n, s in shapes.items()}
    a_values = draw_lora_a(rows, shapes, experts, rank=4, expert_rank=2, seed=3, device=torch.device("cpu"),
                           dtype=torch.bfloat16)
    scales = {module: 0.5 for module in rows}
    streamed = LoraBGrads(rows, a_values, scales, experts)
    for name, grad in grads.items():
        streamed.add(name, grad)
    streamed.add("not.an.adapted.weight", torch.ones(1))
    got = streamed.b_grads()
    for module, (kind, names) in rows.items():
        whole_G = compose(kind, names, grads, experts)
        want = 0.5 * whole_G @ a_values[f"{module}.lora_A"].transpose(-1, -2)
        torch.testing.assert_close(got[f"{module}.lora_B"], want)
    assert a_values["layers.0.mlp.experts.linear_fc1.lora_A"].shape == (2, 2, 5)


def test_streamed_b_grads_refuse_a_missing_part():
    spec = _one_moe_layer_spec()
    rows = lora_rows(spec, ["o_proj"])
    shapes = {names[0]: torch.Size([3, 5]) for _, names in rows.values()}
    a_values = draw_lora_a(rows, shapes, 2, 4, 2, 0, torch.device("cpu"), torch.float32)
    with pytest.raises(KeyError, match="no gradient"):
        LoraBGrads(rows, a_values, {m: 1.0 for m in rows}, 2).b_grads()
