"""A sweep's outputs when the world around them fails: its stdout closed by `| head -1`, a second
sweep given the same --overwrite file, a results file that can take no more bytes. Real ranks,
real pipes, a real file-size limit (RLIMIT_FSIZE stands for a full disk: no test fills one)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.support.distributed import REPO, commbench

SWEEP = [sys.executable, "-m", "commbench", "sweep", "--variant", "flat", "-n", "3", "-w", "1", "--no-plot"]


@pytest.mark.slow
def test_a_closed_stdout_ends_the_printing_not_the_run(tmp_path: Path) -> None:
    out = tmp_path / "q.csv"
    args = [*SWEEP, "--op", "all_gather,broadcast", "--dtype", "float32,float64", "-b", "8", "-e", "4K"]
    line = " ".join([*args, "--timeout", "60", "-o", str(out)]) + " | head -1; exit ${PIPESTATUS[0]}"
    done = subprocess.run(["bash", "-c", line], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "stdout was closed; the run goes on" in done.stderr
    rows = pd.read_csv(out)
    assert set(rows.status) == {"ok"}
    # The run went to its end: every op in every dtype up to the largest size.
    largest = rows.groupby(["op", "dtype"]).size_bytes.max()
    assert len(largest) == 4 and set(largest) == {4096}, largest


@pytest.mark.slow
def test_a_second_writer_of_one_results_file_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "same.csv"
    slow = [*SWEEP, "--op", "all_gather", "--sizes", "8,1K,4K", "--iters", "auto", "--time-per-size", "2"]
    first = subprocess.Popen(
        [*slow, "--overwrite", "-o", str(out)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not (out.exists() and out.read_text().count("\n") >= 1) and time.monotonic() < deadline:
            time.sleep(0.2)  # the first run's rank 0 holds the file once its header is written
        second = commbench("sweep", "--op", "all_gather", "--sizes", "8", "--no-plot", "--overwrite", "-o", str(out))
    finally:
        _, stderr = first.communicate(timeout=300)
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert second.returncode == 2 and len(lines) == 1, second.stderr
    assert "is being written by another commbench run right now" in lines[0]
    assert "# starting" not in second.stdout  # refused before any rank started
    assert first.returncode == 0, stderr
    rows = pd.read_csv(out)
    assert len(rows) == 3 and rows.run_id.nunique() == 1  # one run's rows, none interleaved


def _file_size_limit(limit: int):
    def apply() -> None:  # Python ignores SIGXFSZ: a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.slow
def test_a_full_results_file_is_said_as_such_and_keeps_its_rows(tmp_path: Path) -> None:
    out = tmp_path / "full.csv"
    args = [*SWEEP, "--op", "all_gather", "-b", "8", "-e", "1M", "--no-history", "-o", str(out)]
    done = subprocess.run(
        args, cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=_file_size_limit(6000)
    )
    first = next(line for line in done.stderr.splitlines() if line.startswith("commbench:"))
    assert done.returncode == 2, done.stderr
    assert "cannot write" in first and "File too large; it keeps the" in first and "Traceback" not in done.stderr
    kept = int(first.split("it keeps the ")[1].split()[0])
    rows = pd.read_csv(out)
    assert 0 < kept == len(rows) < 18 and set(rows.status) == {"ok"}  # whole rows only, as many as it says
    assert out.read_bytes().endswith(b"\n")
