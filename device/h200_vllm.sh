#!/usr/bin/env bash
# vLLM on the H200 device machine: the parts from scripts/build_vllm_device_parts.sh arrive one per
# call (the 64 MiB carry limit), consecutive calls while the machine is warm (30 s idle):
#   route 1, vLLM 0.26.0 (.vparts/p1 .. p3):
#     run(carry=[".vparts/p1"], "bash device/h200_vllm.sh take")          and p2, p3 likewise
#     run(carry=[".whl", ".pkgs"], "bash device/h200_vllm.sh start 540 'bash device/vllm_job_h200.sh'")
#   route 2, vLLM 0.34.0 (.vparts/0.34.0/p1 .. p4; the CUDA kit .vparts/cuda/p1 .. only for an image without nvcc):
#     run(carry=[".vparts/0.34.0/p1"], "bash device/h200_vllm.sh take")   and p2 .. p4 (and cuda/pN) likewise
#     run(carry=[".whl", ".pkgs"], "bash device/h200_vllm.sh start 540 'bash device/vllm_job_h200.sh probe glm'")
#   run("bash device/h200_vllm.sh watch 540")                            while the job runs
# `start` unpacks vLLM into /tmp/vsite once (and a carried CUDA kit into /tmp/cudakit, made CUDA_HOME:
# DeepGEMM and TileLang compile with its nvcc; the launcher hands CUDA_HOME to its Ray workers), then
# hands over to h200_detached.sh, which installs the project's carry and puts /tmp/vsite on PYTHONPATH
# after it (the project's pinned transformers and huggingface_hub win; vLLM brings only what the image
# and the carry lack).
set -u
case "$1" in
    take)
        mkdir -p /tmp/vparts && find .vparts -name '*.txz.*' -exec cp {} /tmp/vparts/ \; && ls -l /tmp/vparts ;;
    start|watch)
        if [ "$1" = start ] && [ ! -e /tmp/vsite/.unpacked ]; then
            mkdir -p /tmp/vsite && cat /tmp/vparts/vllm.txz.* | xz -d -T0 | tar x -C /tmp/vsite \
                && touch /tmp/vsite/.unpacked || { echo "vLLM parts incomplete: $(ls /tmp/vparts)"; exit 1; }
        fi
        if [ "$1" = start ] && compgen -G "/tmp/vparts/cuda.txz.*" >/dev/null && [ ! -e /tmp/cudakit/.unpacked ]; then
            mkdir -p /tmp/cudakit && cat /tmp/vparts/cuda.txz.* | xz -d -T0 | tar x -C /tmp/cudakit \
                && touch /tmp/cudakit/.unpacked || { echo "CUDA kit parts incomplete: $(ls /tmp/vparts)"; exit 1; }
        fi
        [ -e /tmp/cudakit/.unpacked ] && export CUDA_HOME=/tmp/cudakit PATH=/tmp/cudakit/bin:$PATH
        exec bash device/h200_detached.sh "$@" ;;
    *) echo "usage: h200_vllm.sh take | start WATCH_S CMD | watch WATCH_S" >&2; exit 2 ;;
esac
