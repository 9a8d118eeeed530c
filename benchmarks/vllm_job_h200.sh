#!/usr/bin/env bash
# The vLLM engine on one H200 (vLLM 0.26 over the image's torch 2.11; started by
# benchmarks/h200_vllm.sh), on the Qwen3-30B-A3B 4-layer slice (model=qwen3_moe_4layer):
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
#   bash benchmarks/vllm_job_h200.sh [bench] [ckpt] [main] [replay] [adapter] [hf]      (default: all)
set -u
parts=${*:-bench ckpt main replay adapter hf}
python3 -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
common=(recipe=tiny_grpo_chat algorithm.prompts_per_step=16 algorithm.mini_batch_prompts=16 algorithm.samples_per_prompt=4
        model=qwen3_moe_4layer cluster=h200x1 inference.engines=1 trainer.backend=hf trainer.lora.rank=16
        trainer.lora.alpha=32 trainer.optimizer.lr=1e-4 "trainer.lora.targets=[q_proj,k_proj,v_proj,o_proj]"
        algorithm.max_response_len=256 inference.max_model_len=320 run.eval_every_steps=0 checkpoint.every_steps=0
        "run.output_dir=$JOB/runs")
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
    esac
done
