"""The plan's generation estimate per engine, against what the engines did on one H200
(plan/timing.py cites the runs), and dynamic sampling's rounds."""
import pytest

QMOE_H200 = ["recipe=tiny_grpo_chat", "model=qwen3_moe_4layer", "cluster=h200x1", "inference.engines=1",
             "algorithm.prompts_per_step=16", "algorithm.mini_batch_prompts=16", "algorithm.samples_per_prompt=4",
             "algorithm.max_response_len=256", "inference.max_model_len=320"]
GLM_SLICE_H200 = ["recipe=tiny_grpo_chat", "model=glm5_3_flash_4layer", "cluster=h200x1", "inference.engines=1",
                  "algorithm.prompts_per_step=8", "algorithm.mini_batch_prompts=8", "algorithm.samples_per_prompt=8",
                  "algorithm.max_response_len=256", "inference.max_model_len=1024"]


@pytest.mark.parametrize(("overrides", "measured_s"), [
    ([*QMOE_H200, "inference.backend=vllm"], (1.38, 1.75)),  # vLLM 0.26, CUDA graphs, 64 x 256
    ([*QMOE_H200, "inference.backend=hf"], (2.19, 2.19)),    # the hf engine, same model and batch
    ([*GLM_SLICE_H200, "inference.backend=hf"], (65.0, 65.0)),  # the hf engine on the GLM slice (fla kernels)
])
def test_a_round_is_planned_within_1_5x_of_the_h200_runs(point, overrides, measured_s):
    timing = point(*overrides).plan.timing
    low, high = measured_s
    assert low / 1.5 <= timing.generation_round_s <= high * 1.5


def test_dynamic_sampling_rounds_bound_the_phase_not_a_round(point):
    dapo = point("recipe=dapo_sync").plan.timing
    assert dapo.generation_rounds == 4 and dapo.generation_s == pytest.approx(4 * dapo.generation_round_s)
    assert dapo.longest_wait_s >= dapo.generation_s  # the timeout waits out every round
    off = point("recipe=dapo_sync", "algorithm.dynamic_sampling.enabled=false").plan.timing
    assert off.generation_rounds == 1 and off.generation_s == pytest.approx(off.generation_round_s)
