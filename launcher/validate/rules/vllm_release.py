"""The installed vLLM against what the config asks of it (launcher/vllm_release.py): checked
before Ray, since an engine that cannot build its model or take its weights fails only after
the trainers have loaded. Nothing is checked where vLLM is not installed (pre-commit, the
checks-only package): the engine's own import then names the fix."""
from launcher.config.schema.choices import GpuArch, InferenceBackendName
from launcher.plan.sync import SyncTransport
from launcher.validate.registry import error, rule
from launcher.vllm_release import TESTED, installed_version, release_of


@rule("INF012")
def installed_vllm_runs_the_config(cfg, plan):
    """The installed vLLM is a release the backend runs on, has the model, and has the weight
    transfer the plan picked."""
    version = installed_version()
    if cfg.inference.backend is not InferenceBackendName.vllm or version is None:
        return
    release = release_of(version)
    if release is None:
        yield error("inference.backend", f"inference.backend=vllm with vLLM {version} installed",
                    "The vllm backend is checked against the source of, and run on, two release lines only; "
                    "the engine, LoRA and weight-transfer APIs change between releases.",
                    f"Install {TESTED}, or use inference.backend=hf.")
        return
    if plan.arch.is_glm5_next and not release.glm5_next and cfg.cluster.gpu.arch is not GpuArch.cpu:
        yield error("inference.backend", f"model_type {cfg.model.arch.model_type} with vLLM {version} installed",
                    "vLLM registers GLM-5.3-Flash (Glm5NextForCausalLM) from 0.30 on; this release cannot build it.",
                    "Install vllm 0.32.x (torch 2.13), use inference.backend=hf, or a model this release serves "
                    "(model=qwen3_moe_4layer).")
    if plan.sync.transport is SyncTransport.vllm_nccl and not release.nccl_transfer:
        yield error("placement.mode", f"async vLLM engines on GPUs (NCCL weight transfer) with vLLM {version}",
                    f"vLLM {release.line} has no trainer-side NCCL engine, and its static sender is not wired "
                    "here; only its CUDA IPC transfer (colocated engines) is.",
                    "Use placement.mode=colocated, or install vllm 0.32.x (torch 2.13).")
