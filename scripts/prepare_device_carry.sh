#!/usr/bin/env bash
# Rebuild the H200 device machine's package carry (.whl/ and .pkgs/, both gitignored) from
# .venv, pinned to the versions installed there, and print its size. Run from anywhere:
#   bash scripts/prepare_device_carry.sh
# then name ".whl" and ".pkgs" in the run tool's carry and start the command with
#   bash device/h200_session.sh "<seconds> <command>" ...
# (or, by hand: pip install --no-index --no-deps --target /tmp/site .whl/*.whl; untar
# .pkgs/*.txz into /tmp/site; PYTHONPATH=/tmp/site:$PWD).
#
# What travels is what a run imports (python -X importtime over the tiny megatron recipe:
# driver, Ray workers, Ray's dashboard/agent processes) minus what the device image already
# holds (/work/.library/device/KINDS.md, "Python packages already there"):
#   .whl/   binary wheels from PyPI (no pure-Python tree of them in .venv is portable enough
#           to trust): rpds-py, pydantic-core, protobuf (the image's may predate the gencode
#           of googleapis-common-protos / opentelemetry-proto), megatron-core (a C++ helper),
#           fla-core + flash-linear-attention 0.6.0 (GPU kernels: never installed in a CPU
#           venv here, so downloaded, not packed), and py-spy (device/stack_sampler.sh: where
#           a slow phase on the GPU spends its time), kernels (transformers 5.25's from_pretrained
#           refuses to load a model without it: "Kernels are not available", H200 2026-12-04).
#   .pkgs/  site-packages trees packed with xz -9 from .venv: ray (without jars, dashboard UI,
#           data/train/tune/serve/rllib/llm; scripts/pack_device_site.sh), transformers (the
#           .venv version the code is tested with; the image's 5.17.0 is older), and deps.txz:
#           every other pure-Python distribution the image lacks, listed below, packed file by
#           file from each distribution's RECORD (namespace packages such as google/ and
#           opentelemetry/ are shared by several distributions).
# Left out on purpose (not imported by a run; add them here if that changes): wandb and
# platformdirs (megatron.core.timers imports wandb only if present; logging.wandb is off by
# default), virtualenv + distlib (Ray's runtime_env pip/uv environments only), google-api-core/google-auth (opencensus' exporters only).
# huggingface_hub travels: the transformers a fresh `pip install -e .[rl]` resolves (5.25) refuses
# the image's huggingface_hub 1.33 at import (it wants >= 2.4, which speaks httpx2, not httpx).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || { echo "no .venv here: pip install -e '.[rl,dev,megatron-cpu]' first" >&2; exit 1; }

# Binary packages: wheels pinned to .venv's versions (fla: pyproject.toml's megatron extra).
WHEELS_FROM_VENV=(rpds-py pydantic-core protobuf megatron-core kernels)
WHEELS_PINNED=(fla-core==0.6.0 flash-linear-attention==0.6.0 py-spy==0.4.3)
# Pure-Python distributions missing from the image, packed into .pkgs/deps.txz.
DEPS=(
    hydra-core omegaconf antlr4-python3-runtime                          # config
    datasets dill multiprocess                                           # data files
    math-verify latex2sympy2_extended                                    # math rewards
    jsonschema jsonschema-specifications referencing                     # ray
    pydantic annotated-types typing-inspection typing_extensions         # ray (dashboard, workers)
    aiohttp-cors colorful smart_open opencensus opencensus-context       # ray[default]
    opentelemetry-api opentelemetry-sdk opentelemetry-semantic-conventions
    opentelemetry-exporter-prometheus opentelemetry-proto googleapis-common-protos
    huggingface_hub httpx2 httpcore2 truststore                          # transformers >= 5.25
    tomlkit                                                              # kernels (below)
)

version() { "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }

rm -rf .whl .pkgs
mkdir -p .whl .pkgs
specs=("${WHEELS_PINNED[@]}")
for name in "${WHEELS_FROM_VENV[@]}"; do specs+=("$name==$(version "$name")"); done
# The device README's flags: CPython 3.12 manylinux wheels only, none of their dependencies.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d .whl "${specs[@]}" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
[ "$(ls .whl/*.whl | wc -l)" -eq "${#specs[@]}" ] || { echo "expected ${#specs[@]} wheels in .whl/" >&2; exit 1; }

bash scripts/pack_device_site.sh ray transformers >/dev/null

# deps.txz: each distribution's files as its RECORD lists them (no __pycache__, no bin/ scripts),
# its dist-info included (datasets and transformers read versions through importlib.metadata).
site=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$PY" - "${DEPS[@]}" >.pkgs/deps.files <<'EOF'
import importlib.metadata as md, sys
files = set()
for name in sys.argv[1:]:
    dist = md.distribution(name)
    for f in dist.files or ():
        p = str(f)
        if p.startswith("..") or "__pycache__" in p or p.endswith(".pyc"):
            continue
        files.add(p)
print("\n".join(sorted(files)))
EOF
tar cf - -C "$site" --no-recursion --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
    -T "$PWD/.pkgs/deps.files" | xz -T0 -9 >.pkgs/deps.txz
rm .pkgs/deps.files

echo "device carry (pinned to .venv):"
for w in .whl/*.whl; do printf '  %8s  %s\n' "$(du -h "$w" | cut -f1)" "$w"; done
for p in .pkgs/*.txz; do printf '  %8s  %s\n' "$(du -h "$p" | cut -f1)" "$p"; done
echo "  deps.txz holds: $(for d in "${DEPS[@]}"; do printf '%s==%s ' "$d" "$(version "$d")"; done)"
total=$(du -cb .whl/*.whl .pkgs/*.txz | tail -1 | cut -f1)
echo "total: $((total / 1048576)) MiB ($total bytes); the per-call carry limit is 64 MiB (repo and .tritonparts/ included)"
