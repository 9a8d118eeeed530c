"""A colocated step's swap: what the sync loop does around generation, priced term by term.

Per step (launcher/driver/loop/loop_sync.py): the trainer's state leaves the GPU, the engines wake,
generate, sleep, and the trainer's state comes back. The metrics' `rollout_s` spans all of it;
`gen_s` only the generation. Each term is bytes over a measured rate, or a measured call:
- the trainer's copies run at its backend's path: the Megatron trainer moves its tensors
  through reused pinned buffers (launcher/workers/pinned.py), the hf trainer by `model.to()`,
  pageable memory that the driver stages through a bounce buffer;
- vLLM's sleep and wake: level 2 unmaps and remaps the pool (nothing copied), level 1 also
  copies the weights to host and back;
- the hf engine's wake, sleep and the Ray calls around them: the residual its runs left, plus
  at level 1 its weights' pageable copies (`model.to("cpu")`).
"""
from launcher.config.schema.choices import InferenceBackendName, TrainerBackendName
from launcher.config.schema.root import LauncherConfig

PINNED_OFFLOAD_GIB_PER_S = 51.0
"""The Megatron trainer's offload and reload through its pinned host buffers once they exist:
55 GB/s each way on the H200 (benchmarks/offload_bandwidth.py, docs/results.md)."""
PAGEABLE_TO_HOST_GIB_PER_S = 46.0 / 38.7
"""A trainer's `.to("cpu")` of its own tensors on the H200, inside the launcher: the GLM slice's
offload before pinned buffers, host RSS 5.5 -> 51.5 GiB in 38.7 s
(docs/results/main_job_slice4_h200x1_startup.memory.jsonl). offload_bandwidth.py's 48 MiB
tensors went slower (0.90 GiB/s); a model's large tensors (embeddings, fused experts) are what
the hf trainer moves."""
PAGEABLE_TO_DEVICE_GIB_PER_S = 16 / 3.31
"""The way back, pageable: 16 GiB in 3.31 s (docs/results/offload_bandwidth_h200_16gib.txt)."""
VLLM_LEVEL2_SLEEP_WAKE_S = 0.09 + 0.51
"""vLLM 0.26 on one H200, its 96 GiB pool unmapped and remapped: sleep 0.09 s, wake 0.51 s
(docs/results/vllm026_engine_generation_h200x1_2026-12-04.json)."""
VLLM_LEVEL1_S_PER_WEIGHT_GIB = (4.32 + 0.62 - VLLM_LEVEL2_SLEEP_WAKE_S) / 5.8
"""Level 1 also keeps the weights in host RAM: the same engine slept in 4.32 s and woke in 0.62 s
with its 5.8 GiB of weights (same file); beyond level 2's calls, per GiB of weights."""
HF_ENGINE_SWAP_S = 2.0
"""The hf engine's wake and sleep and the Ray calls: the GLM slice's steady steps (hf engine,
Megatron trainer) spent 3.9-5.5 s of rollout outside generation, ~1.9 s of it pinned copies."""


def _trainer_rates(cfg: LauncherConfig) -> tuple[float, float, str]:
    """(GiB/s to host, GiB/s to the device, which path) of the configured trainer's offload."""
    if cfg.trainer.backend is TrainerBackendName.megatron:
        return PINNED_OFFLOAD_GIB_PER_S, PINNED_OFFLOAD_GIB_PER_S, "pinned"
    return PAGEABLE_TO_HOST_GIB_PER_S, PAGEABLE_TO_DEVICE_GIB_PER_S, "pageable"


def _engine_sleep_wake_s(cfg: LauncherConfig, engine_weights_gib: float, level: int) -> float:
    if cfg.inference.backend is InferenceBackendName.vllm:
        return VLLM_LEVEL2_SLEEP_WAKE_S + (VLLM_LEVEL1_S_PER_WEIGHT_GIB * engine_weights_gib if level == 1 else 0.0)
    copies = engine_weights_gib / PAGEABLE_TO_HOST_GIB_PER_S + engine_weights_gib / PAGEABLE_TO_DEVICE_GIB_PER_S
    return HF_ENGINE_SWAP_S + (copies if level == 1 else 0.0)


def swap_terms(cfg: LauncherConfig, offloaded_gib_per_gpu: float, engine_weights_gib: float,
               level: int) -> dict[str, float]:
    """Seconds per step by term; empty when the engines never sleep (async placement, level 0)."""
    if level == 0:
        return {}
    to_host, to_device, _ = _trainer_rates(cfg)
    return {"trainer offload": offloaded_gib_per_gpu / to_host, "trainer onload": offloaded_gib_per_gpu / to_device,
            "engine sleep and wake": _engine_sleep_wake_s(cfg, engine_weights_gib, level)}


def swap_basis(cfg: LauncherConfig, terms: dict[str, float], offloaded_gib_per_gpu: float, level: int) -> str:
    """Where timing.swap_s comes from, for the plan's origins."""
    to_host, to_device, path = _trainer_rates(cfg)
    return (f"trainer offload {terms['trainer offload']:.1f} s + onload {terms['trainer onload']:.1f} s "
            f"({offloaded_gib_per_gpu:.1f} GiB per GPU at {to_host:.2g} / {to_device:.2g} GiB/s, {path}: "
            f"{cfg.trainer.backend.value} trainer) + {cfg.inference.backend.value} engine sleep and wake at "
            f"level {level} {terms['engine sleep and wake']:.1f} s (plan/swap.py)")
