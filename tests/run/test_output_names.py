"""Default output names are each run's own, and a name taken by another run after rank 0 checked it
ends the run in one line: the peers leave quietly instead of failing in a collective."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from commbench.errors import ExitCode
from commbench.results.paths import default_output, run_tag
from tests.support.distributed import commbench as commbench_process
from tests.support.plugins import TAKE_ENV


def test_runs_started_in_the_same_second_get_different_default_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20260101-120000")  # one second for every run
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    names = {default_output("gloo", 2, tmp_path).name for _ in range(50)}  # none created: only the names differ
    assert len(names) == 50
    assert all(n.startswith("20260101-120000-gloo-n2-") and n.endswith(".csv") for n in names)


def test_a_slurm_job_names_its_runs_by_job_and_array_task() -> None:
    assert run_tag({"SLURM_JOB_ID": "4242"}).startswith("job4242-")
    tasks = {"SLURM_JOB_ID": "4243", "SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": "3"}
    assert run_tag(tasks).startswith("job4240_3-")
    assert run_tag(tasks) != run_tag(tasks)  # two runs inside one array task still differ
    assert len(run_tag({})) == 6


@pytest.mark.slow
def test_a_name_taken_after_rank_0_checked_it_ends_the_run_in_one_line(tmp_path: Path) -> None:
    """Another run creates the file between rank 0's check and its exclusive create (the plugin op
    does it while the ranks agree): rank 0 says so, and rank 1 leaves without a line of its own."""
    out = tmp_path / "taken.csv"
    proc = commbench_process(
        *"sweep --backend gloo --nproc 2 --op tests.support.plugins:TakesTheOutput --sizes 8 -n 1 -w 0 --no-plot".split(),
        "-o",
        str(out),
        env={TAKE_ENV: str(out), "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == ExitCode.USAGE, proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        f"commbench: error: {out} already exists; choose another --output or pass --overwrite"
    ]
    assert out.read_text() == ""  # the other run's file, untouched
