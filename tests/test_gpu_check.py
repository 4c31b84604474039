"""bench/gpu-check.sh without a GPU: one line saying so, exit 0 (CI runs it this way, so it cannot rot)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.distributed import REPO


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is usable here: the script would run the check")
def test_the_gpu_check_says_in_one_line_that_there_is_no_gpu():
    proc = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu-check.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines() == [
        "gpu-check: no usable CUDA GPU here (or torch is missing or a CPU build): nothing to check; run it on a GPU machine"
    ]
    assert proc.stderr == ""


def test_the_gpu_check_compiles():
    """The GPU-only part is at least valid Python with the arguments its steps take."""
    source = (REPO / "bench" / "gpu_check.py").read_text()
    compile(source, "gpu_check.py", "exec")
    for needed in ("tests/test_nccl.py", "--device", "native_torch", "timers.py", "memory.py", "syncbn_compute.py"):
        assert needed in source
