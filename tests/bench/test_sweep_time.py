"""bench/sweep_time.py's timed share, counted the three ways docs/measurement.md names."""

from __future__ import annotations

import sys

import pytest

from tests.support.distributed import REPO

sys.path.insert(0, str(REPO / "bench"))

from sweep_time import WORKTREE, Run, print_breakdown


def _shares(out: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("| timed share:")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}


def test_the_timed_share_is_printed_three_ways_of_the_process_wall_time(capsys: pytest.CaptureFixture[str]) -> None:
    tree = Run(WORKTREE, 1, wall_s=100.0, code=0, load=(1.0, 1.0), rows=3, timed_work_s=40.0)
    tree.phases = {"timed": 50.0, "warmup": 7.0}
    old = Run("01ee5cb", 1, wall_s=80.0, code=0, load=(1.0, 1.0), rows=3, timed_work_s=40.0)  # no `# time:` line
    print_breakdown([tree, old], [WORKTREE, "01ee5cb"])
    shares = _shares(capsys.readouterr().out)
    assert list(shares.values()) == [["40%", "50%"], ["50%", "-"], ["57%", "-"]]
    assert [label.split(" (")[0] for label in shares] == [
        "timed share: the samples alone",
        "timed share: the timed blocks, each sample's barrier included",
        "timed share: the timed blocks and warm-up",
    ]
