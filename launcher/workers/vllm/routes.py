"""MoE routes from a vLLM engine, in the layout the hf engine returns (hf/routing.py).

vLLM 0.32 (`enable_return_routed_experts=True`) puts on each finished request's
`CompletionOutput.routed_experts` one numpy array `[seq_len - 1, num_hidden_layers, top_k]`
(vllm/outputs.py:84; the rows are positions 0 .. num_tokens - 2, prompt and response: the
scheduler's `take_output` ends them at `request.num_tokens - 1`,
distributed/aux_output_connector/connector.py:116, and `routed_experts_prompt_start` 0 starts
them at the first prompt token, sampling_params.py:436). Its layer axis is every decoder layer,
indexed by the layer number in the module name (moe_runner.py `layer_id`); a dense layer never
writes its row. Its dtype is uint8 for <= 256 experts, else uint16
(model_executor/layers/fused_moe/routed_experts_capturer.py:68).

The hf layout (Generation.routes) is `uint16 [seq_len - 1, moe_layers, top_k]`, the MoE
layers only, in model order: the same positions (the last token is never fed, so it has no
route), so converting is picking the MoE layers' columns and widening to uint16.
Shapes: T positions (seq_len - 1), A all decoder layers, L MoE layers, K top_k.
"""
import numpy as np

from launcher.plan.arch import SPARSE

ROUTE_DTYPE = np.uint16
"""As launcher/workers/hf/routing.py (not imported: that module imports torch at load)."""


def moe_layer_indices(mlp_layer_types) -> list[int]:
    """Decoder-layer numbers of the MoE layers (plan.arch.mlp_layer_types: "dense"/"sparse")."""
    return [i for i, kind in enumerate(mlp_layer_types) if kind == SPARSE]


def to_routes(routed_TAK, seq_len: int, moe_layers: list[int], num_layers: int, top_k: int,
              n_experts: int) -> np.ndarray:
    """One sequence's vLLM routes (`routed_experts`) as the hf layout's uint16 [T, L, K].

    Raises when the array does not fit the sequence (another length, layer count or top-k
    than the model the engine was asked for) or holds an id outside 0 .. n_experts - 1."""
    want = (seq_len - 1, num_layers, top_k)
    if routed_TAK is None:
        raise ValueError(f"vLLM returned no routed_experts for a sequence of {seq_len} tokens (was the engine "
                         "started with enable_return_routed_experts?)")
    routed_TAK = np.asarray(routed_TAK)
    if tuple(routed_TAK.shape) != want or routed_TAK.dtype.kind not in "iu":
        raise ValueError(f"vLLM's routed_experts {routed_TAK.dtype}{list(routed_TAK.shape)} does not fit a sequence "
                         f"of {seq_len} tokens on {num_layers} decoder layers x top-{top_k} (want {list(want)})")
    routes_TLK = routed_TAK[:, moe_layers, :]  # a copy, but strided as the source: made contiguous below
    if routes_TLK.size and (routes_TLK.min() < 0 or routes_TLK.max() >= n_experts):
        raise ValueError(f"vLLM's routed_experts hold expert ids {routes_TLK.min()}..{routes_TLK.max()}, outside "
                         f"0..{n_experts - 1}")
    return np.ascontiguousarray(routes_TLK, dtype=ROUTE_DTYPE)
