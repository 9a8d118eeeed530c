"""FP8 engine weights in the plan (inference.weights_dtype fp8, launcher/plan/fp8.py): the bytes
follow the dtype everywhere an engine's weights are counted, and the issue-50 node plans."""
import math
import re
from collections import Counter

import pytest

from launcher.plan.arch import facts
from launcher.plan.fp8 import quantized_elements, quantized_matrices, scale_bytes
from launcher.plan.shapes import checkpoint_shapes

GIB = 2**30
H200X8 = ("recipe=dapo_sync", "cluster=h200x8", "inference.engines=1")
_MLP = re.compile(r"\.layers\.\d+\.mlp\.(?:experts\.\d+\.|shared_experts\.)?(?:gate|up|down)_proj\.weight$")
_PLAIN_ATTENTION = re.compile(r"\.layers\.\d+\.self_attn\.[qkvo]_proj\.weight$")


def is_quantized(name: str, arch) -> bool:
    """The checkpoint tensors vLLM's online FP8 takes (plan/fp8.py's docstring, with file:line): the MLP
    projections (dense, shared, routed experts) on every model; q/k/v/o only where attention is plain."""
    if _MLP.search(name):
        return True
    return not facts(arch).is_glm5_next and bool(_PLAIN_ATTENTION.search(name))


@pytest.mark.parametrize("model", ["glm5_3_flash", "glm5_3_flash_4layer", "tiny"])
def test_the_priced_matrices_are_the_ones_the_sync_quantizes(point, model):
    """plan/fp8.py's formulas and its name predicate over plan/shapes.py's checkpoint agree, shape for shape."""
    arch = point("recipe=dapo_sync", f"model={model}").cfg.model.arch
    by_name = Counter(shape for name, shape in checkpoint_shapes(arch).items() if is_quantized(name, arch))
    priced = Counter()
    for rows, cols, n in quantized_matrices(arch):
        priced[(rows, cols)] += n
    assert +priced == by_name


def test_glm_fp8_keeps_about_half_the_bytes(point):
    """97.6% of GLM-5.3-Flash's parameters are MLP (experts); the rest stays BF16."""
    arch = point("recipe=dapo_sync").cfg.model.arch
    assert quantized_elements(arch) == 305_915_756_544
    assert scale_bytes(arch) == quantized_elements(arch) // (128 * 128) * 4  # every dimension is whole blocks


def test_engine_weights_sync_and_decode_floor_follow_the_dtype(point):
    bf16 = point(*H200X8).plan
    fp8 = point(*H200X8, "inference.weights_dtype=fp8").plan
    arch = point(*H200X8).cfg.model.arch
    saving = quantized_elements(arch) - scale_bytes(arch)  # 2 B -> 1 B an element, plus the scales
    tp = 8
    assert fp8.memory.inference.weights_gib == pytest.approx(bf16.memory.inference.weights_gib - saving / tp / GIB)
    assert fp8.memory.inference.max_len_sequences_in_budget > bf16.memory.inference.max_len_sequences_in_budget
    assert fp8.timing.decode_step_s < bf16.timing.decode_step_s


def test_every_sync_ships_bf16_to_fp8_engines(point):
    """vLLM quantizes each layer as it arrives (online fp8_per_block): the sync's bytes and the
    export do not change with the engines' dtype."""
    for base in (("recipe=dapo_async", "cluster=h200x16"), H200X8):
        bf16, fp8 = point(*base).plan.sync, point(*base, "inference.weights_dtype=fp8").plan.sync
        assert (fp8.bytes_per_engine, fp8.export_model_bytes) == (bf16.bytes_per_engine, bf16.export_model_bytes)


def test_the_colocated_first_sync_fits_one_h200_node_only_in_fp8(point):
    """Issue 50: 159.7 GiB per GPU with BF16 engine weights (MEM008); FP8 halves the woken weights."""
    bf16 = point(*H200X8)
    fp8 = point(*H200X8, "inference.weights_dtype=fp8")
    assert "MEM008" in bf16.ids and "MEM008" not in fp8.ids
    assert fp8.plan.memory.colocated.first_sync_gib <= fp8.cfg.cluster.gpu.memory_gib
    woken = bf16.plan.memory.inference.weights_gib - fp8.plan.memory.inference.weights_gib
    quantize = fp8.plan.memory.colocated.sync_temporaries_gib - bf16.plan.memory.colocated.sync_temporaries_gib
    # One MoE layer's routed experts in BF16, held by vLLM's layerwise reload until quantized, over tp 8:
    arch = fp8.cfg.model.arch
    layer = 3 * arch.n_routed_experts * arch.hidden_size * arch.moe_intermediate_size * 2
    assert quantize == pytest.approx(layer / 8 / GIB)
    assert bf16.plan.memory.colocated.first_sync_gib - fp8.plan.memory.colocated.first_sync_gib == \
        pytest.approx(woken - quantize)


@pytest.mark.slow
def test_dapo_sync_has_legal_meshes_on_one_h200_node_with_fp8(point):
    from launcher.search.enumerate import search

    assert not search(point("recipe=dapo_sync", "cluster=h200x8").cfg).meshes
    result = search(point("recipe=dapo_sync", "cluster=h200x8", "inference.weights_dtype=fp8").cfg)
    assert result.meshes and all(math.isfinite(m.step.total_s) for m in result.meshes)
