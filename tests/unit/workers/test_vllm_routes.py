"""vLLM's routes in the hf engine's layout (launcher/workers/vllm/routes.py), on arrays shaped as
vLLM 0.32's source says CompletionOutput.routed_experts is: [seq_len - 1, num_hidden_layers,
top_k], uint8 for <= 256 experts (uint16 above), every decoder layer (a dense layer's row is
never written: zeros). Pure numpy: runs in the main venv and in .venv-vllm.
"""
import numpy as np
import pytest

from launcher.workers.vllm.routes import ROUTE_DTYPE, moe_layer_indices, to_routes

LAYERS = ("dense", "sparse", "dense", "sparse", "sparse")
TOP_K, EXPERTS = 2, 8


def _vllm_array(seq_len: int, dtype=np.uint8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    routed = rng.integers(0, EXPERTS, size=(seq_len - 1, len(LAYERS), TOP_K)).astype(dtype)
    routed[:, [i for i, kind in enumerate(LAYERS) if kind == "dense"]] = 0
    return routed


def _convert(routed, seq_len):
    return to_routes(routed, seq_len, moe_layer_indices(LAYERS), len(LAYERS), TOP_K, EXPERTS)


def test_moe_layers_are_the_sparse_ones_in_model_order():
    assert moe_layer_indices(LAYERS) == [1, 3, 4]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_routes_are_the_moe_layers_columns_as_contiguous_uint16(dtype):
    routed = _vllm_array(9, dtype)
    routes = _convert(routed, 9)
    assert routes.dtype == ROUTE_DTYPE == np.uint16 and routes.shape == (8, 3, TOP_K)
    assert routes.flags.c_contiguous and not np.shares_memory(routes, routed)
    np.testing.assert_array_equal(routes, routed[:, [1, 3, 4]].astype(np.uint16))
    assert routes.max() < EXPERTS


def test_the_hf_trainer_takes_them_for_the_same_sequence():
    """The converted array is what routes_grid (the hf trainer's replay) accepts for a
    sequence of prompt + response tokens: one route per position but the last."""
    torch = pytest.importorskip("torch")
    from launcher.workers.hf.routing import routes_grid

    prompt, response = [5, 6, 7, 8], [9, 10, 11]
    routes = _convert(_vllm_array(len(prompt) + len(response)), len(prompt) + len(response))
    grid = routes_grid([routes], [0], [prompt + response], width=8, moe_layers=3, top_k=TOP_K)
    assert grid.shape == (1, 8, 3, TOP_K) and grid.dtype == torch.long
    assert (grid[0, :6] >= 0).all() and (grid[0, 6:] == -1).all()


@pytest.mark.parametrize("fault, match", [
    ("none", "returned no routed_experts"),
    ("short", r"does not fit a sequence of 9 tokens .* \(want \[8, 5, 2\]\)"),
    ("layers", "does not fit"),
    ("float", "does not fit"),
    ("id", "outside 0..7"),
])
def test_an_array_of_another_sequence_or_model_is_refused(fault, match):
    routed = {"none": None, "short": _vllm_array(8), "layers": _vllm_array(9)[:, :4],
              "float": _vllm_array(9).astype(np.float32), "id": _vllm_array(9) + EXPERTS}[fault]
    with pytest.raises(ValueError, match=match):
        _convert(routed, 9)
