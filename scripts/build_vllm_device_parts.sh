#!/usr/bin/env bash
# vLLM for the H200 device machine, which has torch 2.11.0+cu130, no network, and takes at most
# 64 MiB per call: vLLM 0.26.0 (the last release pinning torch==2.11.0) plus what `import vllm`
# and its engine core need that the image lacks, packed with xz and split into parts of <= 44 MiB,
# one per device call (the project's own carry, scripts/prepare_device_carry.sh, travels in a
# fourth call). Run from anywhere:
#   bash scripts/build_vllm_device_parts.sh            -> .vparts/p1 .vparts/p2 .vparts/p3 (gitignored)
# On the device (benchmarks/h200_vllm.sh does all of it): three calls while the machine stays warm,
# each carrying one part and running `bash benchmarks/h200_vllm.sh take`, then one carrying
# .whl and .pkgs that runs `bash benchmarks/h200_vllm.sh start ...`.
# Left out of the wheel: the FA2 library (Hopper runs FA3), vllm-rs, DeepGEMM builds for other
# Pythons and the SM100 FMHA kernels: the H200 uses none of them, and they would need a fourth part.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${VLLM_VERSION:-0.26.0}
PARTS=.vparts
CACHE=$PARTS/wheels   # pip download skips a wheel already here
PY=.venv/bin/python
# Imported by `import vllm`, `LLM(...)` and the engine core, missing from the device image
# (found by importing module by module here, then on the H200; openai's newest release needs
# httpx2, httpcore2, truststore and jiter).
EXTRA=(cbor2 pyzmq openai-harmony openai msgspec pybase64 cachetools llguidance xgrammar apache-tvm-ffi fastapi
       starlette partial-json-parser httpx2 httpcore2 truststore distro sniffio jiter)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$CACHE" "$work/site"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$CACHE" "vllm==$VERSION" 2>&1 \
    | { grep -v "is ignored: it is neither" || true; }
unzip -q "$CACHE"/vllm-"$VERSION"-*.whl -d "$work/site" -x 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/vllm-rs'
rm -rf "$work/site/vllm/third_party/fmha_sm100"
rm -f "$work"/site/vllm/third_party/deep_gemm/_C.cpython-31[134]-*.so
"$PY" -m pip install -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --target "$work/site" "${EXTRA[@]}" 2>&1 \
    | { grep -v -e "is ignored: it is neither" -e WARNING || true; }
rm -rf "$work/site/bin"
tar cf - -C "$work/site" . | xz -T0 -6 >"$work/vllm.txz"
rm -rf "$PARTS"/p[0-9]
( cd "$work" && split -b 44M -a 1 --numeric-suffixes=1 vllm.txz part- )
for part in "$work"/part-*; do n=${part##*-}; mkdir -p "$PARTS/p$n"; mv "$part" "$PARTS/p$n/vllm.txz.$n"; done
ls "$PARTS"/p* -d | wc -l | xargs echo "parts:"; du -sh "$PARTS"/p[0-9]
