#!/usr/bin/env bash
# vLLM for the H200 device machine, which has torch 2.11.0+cu130, no network, and takes at most
# 64 MiB per call: one vLLM release plus what `import vllm` and its engine core need that the image
# lacks, packed with xz and split into parts of <= 44 MiB, one per device call (the project's own
# carry, scripts/prepare_device_carry.sh, travels in the call after them). Run from anywhere:
#   bash scripts/build_vllm_device_parts.sh                      -> .vparts/p1 .. p3 (gitignored): 0.26.0
#   VLLM_VERSION=0.34.0 bash scripts/build_vllm_device_parts.sh  -> .vparts/0.34.0/p1 .. p5: route 2 (GLM-5.3-Flash)
#   VLLM_CUDA_KIT=1 bash scripts/build_vllm_device_parts.sh      -> .vparts/cuda/p1 .. p3: a CUDA 13.0 nvcc
# Releases: 0.26.0 (route 1, the last pinning torch 2.11; ran on the H200 2026-12-04) is the default.
# 0.33/0.34 pin torch 2.14 but build every kernel on torch's stable ABI with nothing newer than 2.11
# (docs/vllm_route2.md); they add GLM-5.3-Flash's TileLang (mHC kernels) and its dependencies.
# TileLang and apache-tvm-ffi (a compiled pair) are pinned to the vLLM wheel's own Requires-Dist;
# the other extras resolve unpinned, as 0.26's kit that ran was built (the PyPI mirror here lacks
# some pinned versions, e.g. 0.34's llguidance>=1.7; versions: docs/vllm_route2.md).
# The CUDA kit (nvcc, NVVM, crt and runtime headers, CCCL, 13.0.x from PyPI) is for an image without
# nvcc: GLM's DSA indexer runs on DeepGEMM and the mHC kernels on TileLang, and both compile with
# nvcc at first use; device/h200_vllm.sh sets CUDA_HOME to it when its parts were taken.
# On the device (device/h200_vllm.sh does all of it): one call per part while the machine stays
# warm, each carrying one part and running `bash device/h200_vllm.sh take`, then one carrying
# .whl and .pkgs that runs `bash device/h200_vllm.sh start ...`.
# Left out of the wheel: the FA2 library (Hopper runs FA3), vllm-rs, DeepGEMM builds for other
# Pythons and the SM100 FMHA kernels: the H200 uses none of them.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${VLLM_VERSION:-0.26.0}
CACHE=.vparts/wheels   # pip download skips a wheel already here
PARTS=.vparts          # the default release's parts where the route-1 commands name them; others beside
[ "$VERSION" = 0.26.0 ] || PARTS=.vparts/$VERSION
PY=.venv/bin/python
PIP_TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
quiet() { grep -v -e "is ignored: it is neither" -e WARNING || true; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$CACHE" "$work/site"

# pack NAME DIR OUTDIR: DIR as NAME.txz in parts of 44 MiB, OUTDIR/pN/NAME.txz.N (old parts removed).
pack() {
    tar cf - -C "$2" . | xz -T0 -6 >"$work/$1.txz"
    rm -rf "$3"/p[0-9]*
    ( cd "$work" && split -b 44M -a 1 --numeric-suffixes=1 "$1.txz" "$1-part-" )
    for part in "$work/$1"-part-*; do n=${part##*-}; mkdir -p "$3/p$n"; mv "$part" "$3/p$n/$1.txz.$n"; done
    ls -d "$3"/p[0-9]* | wc -l | xargs echo "$1 parts:"; du -sh "$3"/p[0-9]*
}

if [ "${VLLM_CUDA_KIT:-0}" = 1 ]; then
    "$PY" -m pip install -q --no-deps "${PIP_TARGET[@]}" --target "$work/site" "nvidia-cuda-nvcc>=13.0,<13.1" \
        "nvidia-nvvm>=13.0,<13.1" "nvidia-cuda-crt>=13.0,<13.1" "nvidia-cuda-runtime>=13.0,<13.1" \
        "nvidia-cuda-cccl>=13.0,<13.1" 2>&1 | quiet
    # nvcc looks for its libraries in lib64; the cu13 wheels use lib.
    ln -s lib "$work/site/nvidia/cu13/lib64"
    pack cuda "$work/site/nvidia/cu13" .vparts/cuda
    exit 0
fi

"$PY" -m pip download -q --no-deps "${PIP_TARGET[@]}" -d "$CACHE" "vllm==$VERSION" 2>&1 | quiet
wheel=$(ls "$CACHE"/vllm-"$VERSION"-*.whl)
unzip -q "$wheel" -d "$work/site" -x 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/vllm-rs'
rm -rf "$work/site/vllm/third_party/fmha_sm100"
rm -f "$work"/site/vllm/third_party/deep_gemm/_C.cpython-31[134]-*.so
# Imported by `import vllm`, `LLM(...)` and the engine core, missing from the device image (found by
# importing module by module here, then on the H200 with 0.26; openai's newest release needs httpx2,
# httpcore2, truststore and jiter). The harmony parser is openai-harmony in 0.26, oss-harmony (the
# same openai_harmony module) from 0.33.
extras=(cbor2 pyzmq openai-harmony oss-harmony openai msgspec pybase64 cachetools llguidance xgrammar apache-tvm-ffi
        fastapi starlette partial-json-parser httpx2 httpcore2 truststore distro sniffio jiter)
if [ -d "$work/site/vllm/models/glm5next" ]; then
    # GLM-5.3-Flash's mHC kernels (model_executor/layers/mhc.py) and TileLang's own dependencies.
    # z3-solver's range is tilelang 0.1.12's own Requires-Dist; vLLM lists none.
    extras+=(tilelang "z3-solver>=4.13.0,<4.15.5" torch-c-dlpack-ext ml-dtypes)
    # Glm5Next imports glm4_1v, which imports vLLM's compressed-tensors quantization at module level
    # (the probe's first failure on the H100, 2026-12-07); loguru is compressed-tensors' own need.
    extras+=(compressed-tensors loguru)
    # 0.34's kernel warm-up imports MiniMax-M3's MSA kernels on every CUDA engine (the second failure
    # there): the CuTe DSL (`cutlass`), whose Python frontend is the libs-core wheel, its MLIR
    # libraries libs-base and the CUDA 13 runtime libs-cu13 (one pip call: they share a folder), and
    # quack-kernels. The main nvidia-cutlass-dsl wheel is only a .pth, which PYTHONPATH ignores:
    # device/h200_detached.sh puts nvidia_cutlass_dsl/dsl_packages on the path instead.
    extras+=(nvidia-cutlass-dsl-libs-core nvidia-cutlass-dsl-libs-base nvidia-cutlass-dsl-libs-cu13 quack-kernels)
fi
requirements=$("$PY" - "$work/site" "$VERSION" "${extras[@]}" <<'EOF'
"""The extras, a harmony package or CuTe DSL wheel the vLLM wheel does not ask for dropped; the PINNED
ones as the vLLM wheel requires them (its Requires-Dist specifier; 0.26's kit that ran left them
unpinned), the CuTe DSL's wheels at the nvidia-cutlass-dsl version it requires."""
import glob, re, sys
from packaging.requirements import Requirement
site, version, extras = sys.argv[1], sys.argv[2], sys.argv[3:]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
PINNED = ("tilelang", "apache-tvm-ffi", "compressed-tensors", "quack-kernels")
VIA = "nvidia-cutlass-dsl"  # the CuTe DSL wheels take its version
metadata = open(glob.glob(f"{site}/vllm-*.dist-info/METADATA")[0]).read()
required = {norm(r.name): r for r in (Requirement(line[len("Requires-Dist: "):])
            for line in metadata.splitlines() if line.startswith("Requires-Dist: ")) if not r.marker
            or r.marker.evaluate({"extra": "", "platform_machine": "x86_64"})}
for extra in extras:
    name = norm(Requirement(extra).name)
    if name.startswith(VIA):
        if VIA in required:
            print(f"{extra}{required[VIA].specifier}")
        continue
    if "harmony" in name and name not in required:
        continue
    pinned = version != "0.26.0" and name in PINNED and name in required
    print(f"{extra}{required[name].specifier}" if pinned else extra)
EOF
)
# shellcheck disable=SC2086  # one requirement a word
"$PY" -m pip install -q --no-deps "${PIP_TARGET[@]}" --target "$work/site" $requirements 2>&1 | quiet
rm -rf "$work/site/bin"
echo "vLLM $VERSION with:" $requirements
pack vllm "$work/site" "$PARTS"
