#!/usr/bin/env bash
# The main job's two runs on one H200, back to back (the second reuses the first's autotune
# cache): from random init (merged export; routing agreement measured, replay off), then from a
# real-format checkpoint of the slice written on the GPU (PEFT adapter export; replay on).
# Between them the merged export goes: the 64 GiB disk cannot hold it beside the checkpoint.
#   bash benchmarks/h200_detached.sh start 590 "bash benchmarks/main_job_h200.sh"
set -u
python3 benchmarks/main_job.py "$JOB/rand" --profile slice4 algorithm.routing_agreement=true
rm -rf "$JOB/rand/export"
python3 benchmarks/main_job.py "$JOB/ckpt" --profile slice4 --from-checkpoint algorithm.routing_replay=true
find "$HOME/.triton" -name '*.autotune.json' | wc -l > "$JOB/autotune_json_files.txt"
df -h /tmp > "$JOB/disk.txt"
