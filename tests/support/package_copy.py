"""A copy of the commbench package in a temporary folder, run as `python -m commbench` from there:
for the tests that prove what adding one module (an op, a backend) takes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.distributed import REPO

Run = Callable[..., subprocess.CompletedProcess[str]]


def copy_package(root: Path) -> Run:
    """Copy commbench/ under root; returns run(*args), the commbench CLI of that copy."""
    shutil.copytree(REPO / "commbench", root / "commbench", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "commbench", *args], cwd=root, env=env, capture_output=True, text=True, timeout=300
        )

    return run
