#!/usr/bin/env bash
# The vLLM engine on one H200 (started by device/h200_vllm.sh over the image's torch 2.11).
# Route 1, vLLM 0.26, on the Qwen3-30B-A3B 4-layer slice (model=qwen3_moe_4layer):
#   bench    benchmarks/engine_generation.py: hf vs vLLM generate, same model and batch, 64 and 256
#            sequences x 256 tokens, against the bandwidth floor; vLLM's sleep and wake
#   main     benchmarks/main_job.py --profile qmoe: GRPO through `python -m launcher`, hf trainer, LoRA
#            merged and sent by vLLM's CUDA IPC transfer, sleep and wake, Ctrl-C after step 3,
#            resume to step 6, merged export and its log-probs against the trainer's
#   ckpt     the main job from a real-format checkpoint (10 bf16 shards written on the GPU) with adapter
#            sync: vLLM reads the base from disk, LoRA adapters (attention) go to vLLM's LoRA on the
#            GPU every step, `export --adapter` and PeftModel's log-probs against the trainer's
#   replay   the main job with algorithm.routing_replay=true: vLLM's routed experts (V1 runner on 0.26)
#            replayed by the hf trainer's Qwen3-MoE router (routing_agreement 1.0 expected every step)
#   adapter  3 steps with adapter sync (trainer.lora.merge=false): vLLM 0.26 failed its first sync on
#            2026-12-04; INF013 now refuses it before Ray (exit 1)
#   hf       2 steps of the same job with the hf engine
# Route 2, vLLM 0.34 (then 0.33), on the GLM-5.3-Flash 4-layer slice (model=glm5_3_flash_4layer; checked
# against the wheels' source only, docs/vllm_route2.md: INF012 warns):
#   probe    versions; each vLLM extension GLM needs imported over torch 2.11 (the stable-ABI builds);
#            TileLang; the nvcc DeepGEMM's JIT would use (CUDA_HOME) and its version. Seconds.
#   glmbench benchmarks/engine_generation.py on the GLM slice: hf vs vLLM generate, 64 and 256 x 256
#            tokens against the bandwidth floor (~10 ms a decode step), sleep and wake
#   glm      benchmarks/main_job.py --profile slice4 (slice2 on a card under 100 GiB) inference.backend=vllm algorithm.routing_replay=true:
#            the Megatron trainer and the vLLM engine colocated, LoRA merged through CUDA IPC, routes
#            from vLLM replayed, sleep and wake, Ctrl-C after step 3, resume to step 6, merged export
#   glmquick 3 steps of the 2-layer slice through `python -m launcher` (Megatron + vLLM colocated, merged LoRA,
#            routing replay, the rollout canary): the shortest proof that GLM generates and trains on vLLM
#   glmfp8   the same with FP8 engine weights (inference.weights_dtype=fp8: vLLM's online fp8_per_block)
#   glmckpt  the same from a real-format checkpoint with adapter sync (trainer.lora.merge=false): vLLM reads
#            the base, the LoRA adapter (GLM's fused projections: launcher/workers/vllm/glm_lora_patch.py)
#            goes to vLLM's LoRA every step; `export --adapter`
#   bash device/vllm_job_h200.sh [PART ...]      (default: route 1's bench ckpt main replay adapter hf)
set -u
parts=${*:-bench ckpt main replay adapter hf}
python3 -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
# The colocated GLM jobs on an 80 GiB card (H100) take the 2-layer slice: the 4-layer one plans 100.9 GiB.
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
big_card=$([ "${gpu_mib:-0}" -gt 100000 ] && echo 1 || echo 0)
glm_profile=${GLM_PROFILE:-$([ "$big_card" = 1 ] && echo slice4 || echo slice2)}
card=$([ "$big_card" = 1 ] && echo h200x1 || echo h100x1)  # the bandwidth floor's cluster file
echo "GPU ${gpu_mib:-?} MiB: colocated GLM jobs on --profile $glm_profile, engine benchmark on cluster=$card"
glm=(--profile "$glm_profile" inference.backend=vllm)
common=(recipe=tiny_grpo_chat algorithm.prompts_per_step=16 algorithm.mini_batch_prompts=16 algorithm.samples_per_prompt=4
        model=qwen3_moe_4layer cluster=h200x1 inference.engines=1 trainer.backend=hf trainer.lora.rank=16
        trainer.lora.alpha=32 trainer.optimizer.lr=1e-4 "trainer.lora.targets=[q_proj,k_proj,v_proj,o_proj]"
        algorithm.max_response_len=256 inference.max_model_len=320 run.eval_every_steps=0 checkpoint.every_steps=0
        "run.output_dir=$JOB/runs")
glm_quick() {  # NAME [OVERRIDE ...]: 3 steps of the 2-layer GLM slice through the launcher, its log under $JOB
    local name=$1; shift
    python3 -m launcher recipe=tiny_grpo_chat model=glm5_3_flash_2layer "cluster=$card" inference.engines=1 \
        trainer.backend=megatron model.dtype=bfloat16 trainer.lora.rank=16 trainer.lora.alpha=32 \
        "trainer.lora.targets=[linear_proj,linear_fc1,linear_fc2,q_proj,k_proj,v_proj,o_proj]" \
        algorithm.prompts_per_step=16 algorithm.mini_batch_prompts=16 algorithm.samples_per_prompt=4 \
        algorithm.max_response_len=64 inference.max_model_len=128 inference.backend=vllm \
        algorithm.routing_replay=true run.steps=3 checkpoint.every_steps=0 "run.output_dir=$JOB/runs" \
        "run.name=$name" "$@" >"$JOB/$name.log" 2>&1
    echo "$name run exit $?"; grep -v -e Warning -e warnings.warn "$JOB/$name.log" | tail -40
}
for part in $parts; do
    case $part in
        bench) python3 benchmarks/engine_generation.py --out "$JOB/engine_generation.json" 2>&1 \
                   | grep -v -e WARNING -e Warning -e warnings.warn ;;
        ckpt) python3 benchmarks/main_job.py "$JOB/qmoe_ckpt" --profile qmoe --from-checkpoint trainer.lora.merge=false \
                  "inference.lora_targets=[q_proj,k_proj,v_proj,o_proj,experts]"
              rm -rf "$JOB/qmoe_ckpt/hf_checkpoint" ;;
        main) python3 benchmarks/main_job.py "$JOB/qmoe" --profile qmoe ;;
        replay) python3 benchmarks/main_job.py "$JOB/qmoe_replay" --profile qmoe algorithm.routing_replay=true ;;
        adapter) python3 -m launcher "${common[@]}" inference.backend=vllm trainer.lora.merge=false run.steps=3 \
                     run.name=adapter "inference.lora_targets=[q_proj,k_proj,v_proj,o_proj,experts]" >"$JOB/adapter.log" 2>&1
                 echo "adapter run exit $?" ;;
        hf) python3 -m launcher "${common[@]}" inference.backend=hf run.steps=2 run.name=hf_engine >"$JOB/hf_engine.log" 2>&1
            echo "hf engine run exit $?" ;;
        probe) python3 - <<'EOF'
import importlib, os, subprocess
for name in ("vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch", "vllm._flashmla_C", "vllm._flashkda_C",
             "vllm._deepselect_C", "vllm.vllm_flash_attn._vllm_fa3_C", "vllm.cumem_allocator",
             "vllm.third_party.deep_gemm", "tilelang", "vllm.models.glm5next.common.model",
             # 0.34's kernel warm-up imports it on every CUDA engine (CuTe DSL: `cutlass`), GLM's too
             "vllm.model_executor.warmup.minimax_m3_msa_warmup"):
    try:
        importlib.import_module(name)
        print("import ok  ", name)
    except Exception as err:  # the first line of each failure is the evidence route 2 wants
        print("import FAIL", name, f"{type(err).__name__}: {str(err).splitlines()[0][:300]}")
from launcher.workers.vllm.glm_start import deep_gemm_nvcc
nvcc = deep_gemm_nvcc()
version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.split(", ")[-2:] if nvcc else ""
print("CUDA_HOME", os.environ.get("CUDA_HOME"), "| DeepGEMM's nvcc", nvcc, version)
EOF
            ;;
        glmbench) python3 benchmarks/engine_generation.py model=glm5_3_flash_4layer model.dtype=bfloat16 "cluster=$card" \
                      --out "$JOB/glm_generation.json" 2>&1 | grep -v -e WARNING -e Warning -e warnings.warn ;;
        glm) python3 benchmarks/main_job.py "$JOB/glm" "${glm[@]}" algorithm.routing_replay=true ;;
        glmquick) glm_quick glmquick ;;
        glmfp8) glm_quick glmfp8 inference.weights_dtype=fp8 ;;
        glmckpt) python3 benchmarks/main_job.py "$JOB/glm_ckpt" "${glm[@]}" --from-checkpoint trainer.lora.merge=false
                 rm -rf "$JOB/glm_ckpt/hf_checkpoint" ;;
    esac
done
