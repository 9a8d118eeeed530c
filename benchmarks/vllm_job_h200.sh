#!/usr/bin/env bash
# The vLLM engine under the launcher on one H200 (vLLM 0.26 over the image's torch 2.11; started by
# benchmarks/h200_vllm.sh): the Qwen3-30B-A3B 4-layer slice (model=qwen3_moe_4layer), hf trainer.
#  1. the main job (benchmarks/main_job.py --profile qmoe): GRPO, LoRA merged into the weights and
#     sent by vLLM's CUDA IPC transfer, sleep and wake, Ctrl-C after step 3, resume to step 6, export;
#  2. adapter sync: the same for 3 steps with trainer.lora.merge=false (vLLM's LoRA on the GPU);
#  3. the hf engine on the same model and batch, 2 steps: generation tok/s against vLLM's.
set -u
python3 -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
python3 benchmarks/main_job.py "$JOB/qmoe" --profile qmoe
common=(recipe=tiny_grpo_chat algorithm.prompts_per_step=16 algorithm.mini_batch_prompts=16 algorithm.samples_per_prompt=4
        model=qwen3_moe_4layer cluster=h200x1 inference.engines=1 trainer.backend=hf trainer.lora.rank=16
        trainer.lora.alpha=32 trainer.optimizer.lr=1e-4 "trainer.lora.targets=[q_proj,k_proj,v_proj,o_proj]"
        algorithm.max_response_len=256 inference.max_model_len=320 run.eval_every_steps=0 checkpoint.every_steps=0
        "run.output_dir=$JOB/runs")
python3 -m launcher "${common[@]}" inference.backend=vllm trainer.lora.merge=false run.steps=3 run.name=adapter \
    "inference.lora_targets=[q_proj,k_proj,v_proj,o_proj,experts]" >"$JOB/adapter.log" 2>&1
echo "adapter run exit $?"
python3 -m launcher "${common[@]}" inference.backend=hf run.steps=2 run.name=hf_engine >"$JOB/hf_engine.log" 2>&1
echo "hf engine run exit $?"
