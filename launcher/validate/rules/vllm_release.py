"""The installed vLLM against what the config asks of it (launcher/vllm_release.py): checked
before Ray, since an engine that cannot build its model or take its weights fails only after
the trainers have loaded. Nothing is checked where vLLM is not installed (pre-commit, the
checks-only package): the engine's own import then names the fix."""
from launcher.config.schema.choices import GpuArch, InferenceBackendName
from launcher.plan.sync import SyncKind, SyncTransport
from launcher.validate.registry import error, rule, warning
from launcher.vllm_release import SOURCE_CHECKED, TESTED, installed_version, release_of


@rule("INF012")
def installed_vllm_runs_the_config(cfg, plan):
    """The installed vLLM is a release the backend runs on (a release checked against its
    source only passes with a warning), has the model, and has the weight transfer the plan
    picked."""
    version = installed_version()
    if cfg.inference.backend is not InferenceBackendName.vllm or version is None:
        return
    release = release_of(version)
    if release is None:
        yield error("inference.backend", f"inference.backend=vllm with vLLM {version} installed",
                    "The vllm backend is checked against the source of four release lines and has run on two; the "
                    "engine, LoRA and weight-transfer APIs change between releases.",
                    f"Install {TESTED}, or {SOURCE_CHECKED}; or use inference.backend=hf.")
        return
    if not release.ran_through_launcher:
        yield warning("inference.backend", f"vLLM {version} installed: checked against its source only",
                      f"The backend was re-checked API by API against vLLM {release.line}'s wheel (docs/vllm_route2.md) "
                      "but no launcher run has confirmed it: the engine start, generation, sleep and wake, the "
                      "weight sync (CUDA IPC, NCCL or buckets), LoRA and returned routes may still fail.",
                      "Report the outcome in issue 40: the vLLM version, the first error with its traceback (or "
                      f"'ran N steps'), and the run's metrics.jsonl; or install {TESTED} to stay on a line that "
                      "has run.")
    if plan.arch.is_glm5_next and not release.glm5_next and cfg.cluster.gpu.arch is not GpuArch.cpu:
        yield error("inference.backend", f"model_type {cfg.model.arch.model_type} with vLLM {version} installed",
                    "vLLM registers GLM-5.3-Flash (Glm5NextForCausalLM) from 0.30 on; this release cannot build it.",
                    f"Install vllm 0.32.x (torch 2.13) or {SOURCE_CHECKED}, use inference.backend=hf, or a model "
                    "this release serves (model=qwen3_moe_4layer).")
    if plan.sync.transport is SyncTransport.vllm_nccl and not release.nccl_transfer:
        yield error("placement.mode", f"async vLLM engines on GPUs (NCCL weight transfer) with vLLM {version}",
                    f"vLLM {release.line} has no trainer-side NCCL engine, and its static sender is not wired "
                    "here; only its CUDA IPC transfer (colocated engines) is.",
                    "Use placement.mode=colocated, or install vllm 0.32.x (torch 2.13).")


@rule("INF013")
def moe_adapter_base_by_sync(cfg, plan):
    """Adapter sync on a MoE model sends the engine its frozen base by sync whenever the engine
    does not read it from model.hf_path (random init, or a level-2 sleep that drops it): that
    load goes into layers vLLM already wrapped in LoRA, which some releases cannot map."""
    version = installed_version()
    release = release_of(version) if version else None
    if (release is None or release.moe_lora_reload or cfg.inference.backend is not InferenceBackendName.vllm
            or plan.sync.kind is not SyncKind.adapter or not plan.arch.has_moe or plan.startup.engine_reads_checkpoint):
        return
    yield error("trainer.lora.merge",
                f"adapter sync on MoE model {cfg.model.name} with vLLM {version}, the engine taking its base weights "
                "by sync (model.hf_path null, or inference.sleep_level 2)",
                f"vLLM {release.line} wraps the fused experts in LoRA after it loads, and its expert loader does not "
                "map the base weights through that wrapper: the first sync fails ('no module or parameter named "
                "layers.0.mlp.experts.0 ... FusedMoEWithLoRA', seen on an H200).",
                "Set trainer.lora.merge=true (merged weights go through vLLM's transfer), start from a checkpoint "
                "(model.hf_path) with inference.sleep_level 1 or null, or install vllm 0.32.x.")
