"""The main job at real width on a CUDA GPU (skipped without one): benchmarks/main_job.py on the
4-layer slice, through `python -m launcher` as a user runs it, from random init (merged export)
and from a real-format checkpoint written on the GPU (PEFT adapter export). Longer than one
device call: start it with device/h200_detached.sh.

    PYTHONPATH=. python -m pytest tests/gpu/test_main_job_gpu.py -m gpu -q -s
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core", reason="megatron-core not installed")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
START_UP_TARGET_S = {False: 90, True: 150}
"""Command to step 1 starting (issue 27): from random init, and from the 44 GiB checkpoint."""


@pytest.mark.parametrize("from_checkpoint", [False, True], ids=["random_init", "checkpoint"])
def test_the_slice_trains_resumes_and_exports(tmp_path, from_checkpoint):
    flag = ["--from-checkpoint"] if from_checkpoint else []
    done = subprocess.run([sys.executable, "benchmarks/main_job.py", str(tmp_path), "--profile", "slice4", *flag],
                          cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    (report_file,) = tmp_path.glob("*_report.json")
    report = json.loads(report_file.read_text())
    assert report["first"]["code"] == 130 and report["resumed"]["code"] == 0
    assert [row["step"] for row in report["steps"]] == [1, 2, 3, 4, 5, 6]
    assert report["first"]["startup"]["startup_s"] <= START_UP_TARGET_S[from_checkpoint]
    assert report["export"]["ok"], report["export"]
