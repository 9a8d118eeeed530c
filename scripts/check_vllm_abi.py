"""Would a vLLM wheel's compiled extensions load over a given torch? Static ELF evidence.

    .venv/bin/python scripts/check_vllm_abi.py --torch TORCH.whl VLLM.whl [VLLM.whl ...] \
        [--part-mib 44] [--work DIR] [--json OUT]

For every ELF .so in each vLLM wheel it reads the undefined dynamic symbols (`nm -D`) and
keeps those torch must provide, in three kinds:
- stable: torch's stable-ABI C shim (`aoti_torch_*`, `torch_*`, unmangled C entry points),
  what extensions built against the stable ABI (TORCH_TARGET_VERSION) call;
- c++: mangled symbols in torch's C++ namespaces (c10, at, torch, caffe2): these tie an
  extension to the exact torch it was built with;
- other: any further name torch's libraries export (e.g. libtorch_python's THP* functions).
Each is checked against what the given torch wheel's shared libraries export (`nm -D
--defined-only`). Python loads extensions with RTLD_NOW, so one missing strong symbol fails
the import with "undefined symbol"; weak ones (`w`, `v`) may stay unresolved and are skipped.

Also printed: each wheel's Requires-Dist pins that matter for running over another torch, and
its size against the device's per-call carry (parts of --part-mib). What this cannot see:
Python code calling torch APIs newer than the given torch, the torch version the stable shim
is asked for at run time, and JIT-compiled kernels (DeepGEMM, FlashInfer, Triton). It runs
nothing on a GPU. docs/vllm_route2.md has the results for vLLM 0.32-0.34 over torch 2.11.0.
"""
import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

STABLE_PREFIXES = ("aoti_torch_", "torch_")
"""Unmangled names of torch's stable C ABI (torch/csrc/inductor/aoti_torch/c/shim.h, torch/csrc/stable/c/shim.h)."""
CXX_TORCH = re.compile(r"^_Z(?:T[VISTHW]|GV)?N[rVKRO]*(?:3c10|2at|5torch|6caffe2)")
"""Mangled names (functions, vtables, typeinfo, guards, thread-local wrappers; cv- and ref-qualified
members) in torch's C++ namespaces."""
PIN_PACKAGES = ("torch", "torchvision", "torchaudio", "transformers", "flashinfer-python", "triton",
                "nvidia-cutlass-dsl", "quack-kernels", "tilelang", "deep-gemm")
"""Requires-Dist entries printed per wheel: what pins vLLM to one torch or CUDA stack at the Python level."""
COMPONENTS = {
    "_C_stable_libtorch": "vLLM _C: core kernels (paged attention, cache ops, quantization, activations)",
    "_moe_C_stable_libtorch": "vLLM _moe_C: MoE kernels (align, top-k, grouped GEMM helpers)",
    "_vllm_fa2_C": "FlashAttention 2 (vllm_flash_attn)",
    "_vllm_fa3_C": "FlashAttention 3 (vllm_flash_attn, Hopper)",
    "_flashmla_C": "FlashMLA: MLA decode, dense and sparse (DSA)",
    "_flashmla_extension_C": "FlashMLA extension (sparse prefill / metadata)",
    "_deepselect_C": "DeepSelect: the DSA indexer's top-k (indexer_topk.py)",
    "_flashkda_C": "FlashKDA: Kimi delta attention kernels",
    "_qutlass_C": "QuTLASS: FP4 / microscaling quantization",
    "cumem_allocator": "cumem allocator (sleep mode's CUDA VMM pool)",
    "fs_io_C": "file I/O helper (weights loading)",
    "spinloop": "spin-loop helper",
    "_C_extension": "DeepGEMM (FP8 GEMMs, the DSA indexer's MQA logits)",
    "libtilelang": "TileLang (JIT compiler of vLLM's mHC kernels)",
    "libtvm_runtime": "TileLang's TVM runtime",
    "libtvm_compiler": "TileLang's TVM compiler",
    "tilelang_cython_wrapper": "TileLang's kernel launcher",
}
KIT_TRIMS = ("vllm/vllm_flash_attn/_vllm_fa2_C", "vllm/vllm-rs", "vllm/third_party/fmha_sm100")
"""What the vLLM 0.26 device kit leaves out (../shared/device/vllm026/build_parts.sh): FlashAttention 2
(the H200 runs FA3), the Rust front end, the SM100 FMHA kernels."""


def classify(name: str, torch_exports: set[str]) -> str | None:
    """'stable', 'c++' or 'other' for a symbol torch must provide; None when it is none of torch's."""
    if name.startswith(STABLE_PREFIXES):
        return "stable"
    if CXX_TORCH.match(name):
        return "c++"
    return "other" if name in torch_exports else None


def parse_nm_posix(text: str, defined: bool) -> set[str]:
    """Names from `nm -D --format=posix` lines ("name[@version] type [value size]").
    Defined: every name, its version dropped. Undefined: unversioned strong references (`U`)
    only: weak ones (`w`, `v`) may stay unresolved at load, and a versioned one
    (`@GLIBCXX_3.4.32`, `@libcudart.so.13`) binds to the library defining that version, never
    to torch, whose symbols are unversioned (it re-exports some libstdc++ names)."""
    names = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        name, _, version = fields[0].partition("@")
        if defined or (fields[1] == "U" and not version):
            names.add(name)
    return names


def dynamic_symbols(path: Path, defined: bool) -> set[str]:
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", "-D", "--format=posix", flag, str(path)], capture_output=True, text=True, check=True)
    return parse_nm_posix(out.stdout, defined)


def demangle(names: list[str]) -> list[str]:
    if not names:
        return []
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def extract_shared_objects(wheel: Path, dest: Path) -> list[Path]:
    """Every ELF .so member of `wheel` (versioned ones, libfoo.so.1, included), unpacked under dest."""
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if re.search(r"\.so(\.\d+)*$", m)]
        for member in members:
            zf.extract(member, dest)
    return [dest / m for m in members if is_elf(dest / m)]


def torch_exports(torch_wheel: Path, work: Path) -> set[str]:
    """Every dynamic symbol the torch wheel's shared libraries define (libtorch*, libc10*, torch's python .so)."""
    exports = set()
    for so in extract_shared_objects(torch_wheel, work / "torch"):
        exports |= dynamic_symbols(so, defined=True)
    return exports


def component(so_name: str) -> str:
    stem = so_name.split(".")[0]
    return COMPONENTS.get(stem, "(not in COMPONENTS)")


def analyze_so(path: Path, exports: set[str]) -> dict:
    """Per kind: how many undefined symbols torch must provide and which of them it lacks.
    'other' names are resolved from torch's exports by definition: libstdc++ names torch
    re-exports (std::filesystem, stringstream) land there."""
    counts, missing = {"stable": 0, "c++": 0, "other": 0}, {"stable": [], "c++": []}
    for name in sorted(dynamic_symbols(path, defined=False)):
        kind = classify(name, exports)
        if kind is None:
            continue
        counts[kind] += 1
        if name not in exports:
            missing[kind].append(name)  # "other" is defined as exported, so it never lacks
    return {"counts": counts, "missing": missing}


def requires_dist(wheel: Path) -> tuple[str, list[str]]:
    """(version, the Requires-Dist lines of PIN_PACKAGES without an extra marker) from the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(m for m in zf.namelist() if m.endswith(".dist-info/METADATA"))
        lines = zf.read(meta).decode().splitlines()
    version = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Version:"))
    pins = [line.split(":", 1)[1].strip() for line in lines
            if line.startswith("Requires-Dist:") and "extra ==" not in line]
    return version, [p for p in pins if re.split(r"[<>=!~;\[ ]", p, maxsplit=1)[0].lower() in PIN_PACKAGES]


def carried_mib(wheel: Path, trims: tuple[str, ...]) -> float:
    """The wheel's members as stored (deflated), less those under `trims`: about what the device carry
    ships before xz (which saves a little more)."""
    with zipfile.ZipFile(wheel) as zf:
        return sum(i.compress_size for i in zf.infolist() if not i.filename.startswith(trims)) / 2**20


def analyze_wheel(wheel: Path, exports: set[str], work: Path, part_mib: float) -> dict:
    version, pins = requires_dist(wheel)
    root = work / wheel.stem
    rows = []
    for so in sorted(extract_shared_objects(wheel, root)):
        result = analyze_so(so, exports)
        rows.append({"so": str(so.relative_to(root)), "what": component(so.name), **result})
    whole, trimmed = carried_mib(wheel, ()), carried_mib(wheel, KIT_TRIMS)
    return {"wheel": wheel.name, "version": version, "pins": pins, "part_mib": part_mib,
            "mib": whole, "parts": math.ceil(whole / part_mib),
            "trimmed_mib": trimmed, "trimmed_parts": math.ceil(trimmed / part_mib), "rows": rows}


def render(report: dict) -> str:
    lines = [f"## {report['wheel']} (version {report['version']})", "",
             f"Carry: {report['mib']:.1f} MiB, {report['parts']} parts of <= {report['part_mib']:g} MiB; without "
             f"{', '.join(KIT_TRIMS)}: {report['trimmed_mib']:.1f} MiB, {report['trimmed_parts']} parts.", "",
             "Requires-Dist: " + " | ".join(report["pins"]), "",
             "| .so | what | torch symbols: stable / C++ / other | missing from torch |", "|---|---|---|---|"]
    for row in report["rows"]:
        c, m = row["counts"], row["missing"]
        lines.append(f"| {row['so']} | {row['what']} | {c['stable']} / {c['c++']} / {c['other']} | "
                     f"{len(m['stable'])} stable, {len(m['c++'])} C++ |")
    for row in report["rows"]:
        names = row["missing"]["stable"] + row["missing"]["c++"]
        if names:
            lines += ["", f"Missing for {row['so']}:", *[f"- `{d}`" for d in demangle(names)]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", type=Path, required=True, help="the torch wheel whose exports are checked against")
    parser.add_argument("wheels", type=Path, nargs="+", help="vLLM wheels")
    parser.add_argument("--part-mib", type=float, default=44.0, help="part size of the device carry (64 MiB a call "
                        "holds the project too; the vLLM 0.26 kit used 44)")
    parser.add_argument("--work", type=Path, help="where the .so files are unpacked (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the reports here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        exports = torch_exports(args.torch, work)
        print(f"{args.torch.name}: {len(exports):,} exported dynamic symbols\n")
        reports = [analyze_wheel(w, exports, work, args.part_mib) for w in args.wheels]
    print("\n\n".join(render(r) for r in reports))
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
