#!/usr/bin/env bash
# The main job's two runs on one H200, back to back (the second reuses the first's autotune
# cache): from a real-format checkpoint of the slice written on the GPU (PEFT adapter export;
# routing replay on), then from random init (merged export; routing agreement measured, replay
# off). Between them the checkpoint goes: the 64 GiB disk cannot hold it beside a merged export.
# py-spy samples the actors every 20 s (device/stack_sampler.sh) for the phases that are slow.
#   bash device/h200_detached.sh start 590 "bash device/main_job_h200.sh [ckpt|rand|both]"
set -u
which=${1:-both}
bash device/stack_sampler.sh 'Trainer|Engine' 20 "$JOB/stacks" &
sampler=$!
if [ "$which" != rand ]; then
    python3 benchmarks/main_job.py "$JOB/ckpt" --profile slice4 --from-checkpoint algorithm.routing_replay=true
    rm -rf "$JOB/ckpt/hf_checkpoint"
fi
if [ "$which" != ckpt ]; then
    python3 benchmarks/main_job.py "$JOB/rand" --profile slice4 algorithm.routing_agreement=true
fi
kill "$sampler"
find "$HOME/.triton" -name '*.autotune.json' | wc -l > "$JOB/autotune_json_files.txt"
df -h /tmp > "$JOB/disk.txt"
