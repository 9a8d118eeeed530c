"""Where a GLM engine's DeepGEMM would find its nvcc (glm_start.deep_gemm_nvcc): the engine
refuses to start without one rather than abort at the first indexer call (DeepGEMM compiles its
kernels with nvcc at first use). Real executables in a temporary folder stand for toolkits."""
import os
import shutil

from launcher.workers.vllm.glm_start import deep_gemm_nvcc


def _toolkit(root, name: str = "nvcc") -> str:
    """A folder holding an executable bin/`name`, as a CUDA toolkit does; returns the folder."""
    os.makedirs(root / "bin", exist_ok=True)
    tool = root / "bin" / name
    tool.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    tool.chmod(0o755)
    return str(root)


def test_cuda_home_decides_and_a_folder_without_nvcc_is_none(tmp_path):
    home = _toolkit(tmp_path / "cuda")
    assert deep_gemm_nvcc({"CUDA_HOME": home, "PATH": ""}) == os.path.join(home, "bin", "nvcc")
    assert deep_gemm_nvcc({"CUDA_PATH": home, "PATH": ""}) == os.path.join(home, "bin", "nvcc")
    (tmp_path / "empty").mkdir()
    assert deep_gemm_nvcc({"CUDA_HOME": str(tmp_path / "empty"), "PATH": f"{home}/bin"}) is None  # PATH not asked


def test_without_cuda_home_the_nvcc_on_path_names_the_toolkit(tmp_path):
    home = _toolkit(tmp_path / "cuda")
    assert deep_gemm_nvcc({"PATH": f"{tmp_path}:{home}/bin"}) == os.path.join(home, "bin", "nvcc")
    # Neither: /usr/local/cuda, where DeepGEMM looks last.
    assert deep_gemm_nvcc({"PATH": str(tmp_path)}) == shutil.which("/usr/local/cuda/bin/nvcc")


def test_dg_jit_nvcc_compiler_overrides_the_toolkits_own(tmp_path):
    home = _toolkit(tmp_path / "cuda", name="other-nvcc")
    chosen = os.path.join(home, "bin", "other-nvcc")
    assert deep_gemm_nvcc({"CUDA_HOME": home, "DG_JIT_NVCC_COMPILER": chosen, "PATH": ""}) == chosen
    assert deep_gemm_nvcc({"CUDA_HOME": home, "PATH": ""}) is None  # no bin/nvcc there
