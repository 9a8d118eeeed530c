#!/usr/bin/env bash
# One device call (H200 machine, wheels in .whl/, Triton cache in .tritonparts/ if any): install the
# carried wheels and any .pkgs/*.txz (site-packages trees packed with xz -9: Ray without its
# jars and dashboard, transformers, which xz packs to a third of their wheels), restore the
# Triton/fla autotune cache, run the given steps each under its own time limit, then hand
# the grown cache back in 15 MB parts. Usage, from the repo root:
#   bash device/h200_session.sh "<seconds> <command>" ...      (logs and results in $OUT)
# .whl/ and .pkgs/ come from scripts/prepare_device_carry.sh (carry: .whl, .pkgs, and .tritonparts if present).
# RETURN_CACHE=0 skips handing the cache back (a last call of the session).
# The fp32-reference parity (benchmarks/megatron_parity.py) one phase a call, back to back: its
# folder under runs/ (ignored, so it stays on the machine while the machine stays warm: 30 s after a
# call; reference.pt, ~5 GB on the 4-layer slice, cannot come back through $OUT), each call copying
# the small JSONs back (a ref cut short after its fp32 backward: the same call again resumes from there):
#   bash device/h200_session.sh "570 python benchmarks/megatron_parity.py --phase ref --dir runs/parity; cp runs/parity/meta.json $OUT/"
#   bash device/h200_session.sh "570 python benchmarks/megatron_parity.py --phase hf --dir runs/parity; cp runs/parity/hf_bf16.json $OUT/"
#   bash device/h200_session.sh "540 python benchmarks/megatron_parity.py --phase megatron --dir runs/parity" \
#       "30 python benchmarks/megatron_parity.py --phase report --dir runs/parity --out $OUT/megatron_h200_parity_fp32.json"
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
for pkg in .pkgs/*.txz; do [ -e "$pkg" ] && { tar xJf "$pkg" -C /tmp/site || exit 1; }; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=$HOME/.triton/inductor  # torch.compile'd kernels travel with the Triton cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TRITON_CACHE_AUTOTUNING=1  # autotune winners on disk (the launcher sets it for its workers too)
if compgen -G ".tritonparts/triton.txz*" >/dev/null; then
    cat .tritonparts/triton.txz* | tar xJf - -C "$HOME" || echo "Triton cache in .tritonparts/ unreadable: starting cold"
else
    echo "no .tritonparts/: Triton and fla kernels autotune from cold (minutes on a first step)"
fi
step=0
for spec in "$@"; do
    step=$((step + 1))
    limit=${spec%% *}
    echo "[$(date +%T)] step $step (limit ${limit}s): ${spec#* }" | tee -a "$OUT/session.log"
    timeout "$limit" bash -c "${spec#* }" >"$OUT/step$step.log" 2>&1
    rc=$?  # before $(date) below resets it
    echo "[$(date +%T)] step $step exit $rc" | tee -a "$OUT/session.log"
done
# xz -9: its larger window finds the repeats between autotune variants (31 MB against -3's 55 MB)
if [ "${RETURN_CACHE:-1}" = 1 ]; then
    tar cf - -C "$HOME" .triton | xz -T0 -9 | split -b 15M - "$OUT/triton.txz.part-"
fi
