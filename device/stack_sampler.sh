#!/usr/bin/env bash
# Where a slow phase spends its time on the GPU machine: every EVERY_S seconds, a py-spy dump
# (Python and native frames) of each Ray actor process whose title matches PATTERN (e.g.
# Trainer), appended to OUT_DIR/ROLE.txt under a "=== pid P at T s" line (one file per role: the
# device tool hands back a few files, not one per sample). Runs until killed.
#   bash device/stack_sampler.sh 'Trainer|Engine' 20 "$JOB/stacks" &
set -u
pattern=$1 every_s=$2 out=$3
mkdir -p "$out"
start=$SECONDS
while true; do
    for pid in $(pgrep -f "ray::.*($pattern)"); do
        role=$(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -oE "$pattern" | head -1)
        { echo "=== pid $pid at $((SECONDS - start)) s"; py-spy dump --native --pid "$pid" 2>&1; } >>"$out/${role:-other}.txt"
    done
    sleep "$every_s"
done
