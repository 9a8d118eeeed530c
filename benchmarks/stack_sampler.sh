#!/usr/bin/env bash
# Where a slow phase spends its time on the GPU machine: every EVERY_S seconds, a py-spy dump of
# each Ray actor process whose title matches PATTERN (e.g. Trainer), into OUT_DIR/ROLE_PID_T.txt.
# Runs until killed; a dump that py-spy cannot take (no ptrace) is skipped with its error kept.
#   bash benchmarks/stack_sampler.sh 'Trainer|Engine' 20 "$JOB/stacks" &
set -u
pattern=$1 every_s=$2 out=$3
mkdir -p "$out"
start=$SECONDS
while true; do
    for pid in $(pgrep -f "ray::.*($pattern)"); do
        role=$(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -oE "$pattern" | head -1)
        py-spy dump --pid "$pid" >"$out/${role:-x}_${pid}_$((SECONDS - start)).txt" 2>&1 || true
    done
    sleep "$every_s"
done
