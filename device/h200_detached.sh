#!/usr/bin/env bash
# A job longer than one device call (10 min): the first call starts it detached (setsid), later
# calls, made while the machine is still warm, watch it; each call returns the job's small
# files. Same environment as h200_session.sh (carry .whl/ and .pkgs/; installed once per machine).
#   bash device/h200_detached.sh start WATCH_S "<command>"   (the command writes under $JOB)
#   bash device/h200_detached.sh watch WATCH_S
#   bash device/h200_detached.sh stop                        (end the job and its Ray processes)
#   RETURN_CACHE=1 bash device/h200_detached.sh watch 0      (hand the Triton cache back too)
# A call returns after WATCH_S seconds or when the job has ended, whichever is first.
set -u
JOB=/tmp/detached
if [ "$1" = stop ]; then  # the job's process group, then the Ray processes it left
    [ -e "$JOB/pid" ] && kill -- -"$(cat "$JOB/pid")" 2>/dev/null
    pkill -f raylet; pkill -f gcs_server; pkill -f 'python -m launcher'; sleep 5; exit 0
fi
if [ ! -e /tmp/site/.installed ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
    for pkg in .pkgs/*.txz; do [ -e "$pkg" ] && { tar xJf "$pkg" -C /tmp/site || exit 1; }; done
    if compgen -G ".tritonparts/triton.txz*" >/dev/null; then cat .tritonparts/triton.txz* | tar xJf - -C "$HOME"; fi
    touch /tmp/site/.installed
fi
# Wheels added to .whl after the first install (a warm machine keeps /tmp/site), unzipped rather
# than pip-installed: pip --target skips a top-level folder that exists, and wheels that share one
# (nvidia_cutlass_dsl/ of the CuTe DSL's base and CUDA wheels) would lose their files.
for whl in .whl/*.whl; do
    [ -e "$whl" ] || continue  # a call that carries no .whl
    name=$(basename "$whl" | cut -d- -f1-2)
    compgen -G "/tmp/site/${name}.dist-info" >/dev/null || python3 -m zipfile -e "$whl" /tmp/site
done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 JOB PATH=/tmp/site/bin:$PATH  # bin: py-spy
# vLLM unpacked by device/h200_vllm.sh; its sampler would import flashinfer, which is not carried.
[ -d /tmp/vsite ] && export PYTHONPATH=$PYTHONPATH:/tmp/vsite VLLM_USE_FLASHINFER_SAMPLER=0
# The CuTe DSL in the vLLM kit (0.34's kernel warm-up imports `cutlass`): what its main wheel's .pth
# would add to the path, which PYTHONPATH folders do not process.
[ -d /tmp/vsite/nvidia_cutlass_dsl/dsl_packages ] && export PYTHONPATH=$PYTHONPATH:/tmp/vsite/nvidia_cutlass_dsl/dsl_packages
export TORCHINDUCTOR_CACHE_DIR=$HOME/.triton/inductor
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TRITON_CACHE_AUTOTUNING=1  # autotune winners on disk (the launcher sets it for its workers too)
if [ "$1" = start ]; then
    rm -rf "$JOB" && mkdir -p "$JOB"
    setsid nohup bash -c "$3; echo \$? > $JOB/rc" >"$JOB/job.log" 2>&1 < /dev/null &
    echo $! > "$JOB/pid"
fi
end=$((SECONDS + $2))
while [ $SECONDS -lt $end ] && [ ! -e "$JOB/rc" ]; do sleep 5; done
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv >"$JOB/nvidia_smi.txt" 2>&1
# The job's own logs and reports (depth 2 at most: a run folder's checkpoints nest deeper), then
# each run's metrics.jsonl, all flat in $OUT as PART__PART__NAME: the device tool hands back no
# file nested deeper than that (a cp --parents copy of rand/x.log was left out as "depth").
find "$JOB" -maxdepth 2 -type f \( -name '*.log' -o -name '*.json' -o -name '*.jsonl' -o -name '*.txt' -o -name rc \) \
    -size -4M -printf '%P\n' | while read -r rel; do cp "$JOB/$rel" "$OUT/${rel//\//__}"; done
for metrics in "$JOB"/*/runs/*/metrics.jsonl; do
    [ -e "$metrics" ] && cp "$metrics" "$OUT/$(basename "$(dirname "$metrics")")_metrics.jsonl"
done
tail -c 3000 "$JOB/job.log"
[ -e "$JOB/rc" ] && echo "job exit $(cat "$JOB/rc")" || echo "job still running"
if [ "${RETURN_CACHE:-0}" = 1 ]; then
    tar cf - -C "$HOME" .triton | xz -T0 -9 | split -b 15M - "$OUT/triton.txz.part-"
fi
