"""scripts/check_vllm_abi.py on real ELF files built here with gcc: a stand-in torch library
exporting some of torch's names and an extension referencing them, packed as wheels."""
import runpy
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("gcc", "nm", "c++filt")),
                                reason="needs gcc and binutils (nm, c++filt)")

TORCH_C = """
int aoti_torch_empty_strided(void) { return 0; }
int _ZN3c1019UndefinedTensorImpl10_singletonE = 1;
int THPVariable_Wrap(void) { return 0; }
"""
EXTENSION_C = """
extern int aoti_torch_empty_strided(void);              /* stable, torch has it */
extern int torch_new_stable_ivalue(void);                /* stable, newer than this torch */
extern int _ZN3c1019UndefinedTensorImpl10_singletonE;    /* C++ (c10), torch has it */
extern int _ZNR5torch7Library5_implEv(void);             /* C++ (torch, ref-qualified), missing */
extern int THPVariable_Wrap(void);                       /* other: exported by torch */
extern int cuda_like_function(void);                     /* none of torch's */
extern int aoti_torch_optional(void) __attribute__((weak)); /* weak: may stay unresolved */
int use(void) {
    return aoti_torch_empty_strided() + torch_new_stable_ivalue() + _ZN3c1019UndefinedTensorImpl10_singletonE
        + _ZNR5torch7Library5_implEv() + THPVariable_Wrap() + cuda_like_function()
        + (aoti_torch_optional ? aoti_torch_optional() : 0);
}
"""


def _shared_object(tmp: Path, name: str, source: str) -> Path:
    (tmp / f"{name}.c").write_text(source)
    out = tmp / f"{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(tmp / f"{name}.c")], check=True)
    return out


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("abi")
    return tmp, _shared_object(tmp, "torch", TORCH_C), _shared_object(tmp, "ext", EXTENSION_C)


@pytest.fixture(scope="module")
def abi():
    return runpy.run_path(str(ROOT / "scripts/check_vllm_abi.py"))


def test_undefined_symbols_are_sorted_into_torch_kinds_and_checked_against_its_exports(built, abi):
    _, torch_so, ext_so = built
    exports = abi["dynamic_symbols"](torch_so, defined=True)
    result = abi["analyze_so"](ext_so, exports)
    assert result["counts"] == {"stable": 2, "c++": 2, "other": 1}
    assert result["missing"] == {"stable": ["torch_new_stable_ivalue"], "c++": ["_ZNR5torch7Library5_implEv"]}


def test_versioned_and_weak_references_never_count_as_torchs(abi):
    nm_lines = "cudaMalloc@libcudart.so.13 U\n_ZSt21ios_base_library_initv@GLIBCXX_3.4.32 U\naoti_torch_x w\n" \
               "aoti_torch_y U\n"
    assert abi["parse_nm_posix"](nm_lines, defined=False) == {"aoti_torch_y"}
    assert abi["classify"]("_ZNSt10filesystem6statusERKNS_7__cxx114pathE", set()) is None
    assert abi["classify"]("_ZTVN3c1011StorageImplE", set()) == "c++"


def test_a_wheel_report_names_the_missing_symbols_the_pins_and_the_parts(built, abi, capsys, tmp_path):
    tmp, torch_so, ext_so = built
    torch_whl = _wheel(tmp_path / "torch-0-py3-none-any.whl", {"torch/lib/libtorch_cpu.so": torch_so.read_bytes()})
    meta = b"Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\nRequires-Dist: torch==2.14.0\n" \
           b"Requires-Dist: numpy\nRequires-Dist: torch==2.99; extra == \"x\"\n"
    vllm_whl = _wheel(tmp_path / "vllm-9.9.9-py3-none-any.whl", {
        "vllm/_C_stable_libtorch.abi3.so": ext_so.read_bytes(), "vllm/vllm-rs": b"\0" * 4096,
        "vllm-9.9.9.dist-info/METADATA": meta})
    assert abi["main"](["--torch", str(torch_whl), str(vllm_whl), "--part-mib", "0.001"]) == 0
    out = capsys.readouterr().out
    assert "Requires-Dist: torch==2.14.0\n" in out  # numpy is no pin of interest; the extra's entry is left out
    assert "| vllm/_C_stable_libtorch.abi3.so | vLLM _C" in out and "| 2 / 2 / 1 | 1 stable, 1 C++ |" in out
    assert "- `torch_new_stable_ivalue`" in out and "- `torch::Library::_impl() &`" in out
    report = abi["analyze_wheel"](vllm_whl, abi["dynamic_symbols"](torch_so, defined=True), tmp_path / "w", 0.001)
    assert report["trimmed_parts"] < report["parts"]  # vllm/vllm-rs is one of the kit's trims
