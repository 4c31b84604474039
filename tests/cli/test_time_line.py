"""Every sweep ends with one `# time:` line: where its wall time went, in categories that with
their remainder sum to it (2 real Gloo ranks through the CLI, charts drawn)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commbench.run.phases import OTHER, PHASES, parse_time_line
from tests.support.distributed import commbench


@pytest.mark.slow  # starts processes, or runs whole fake sweeps: outside the quick loop
def test_a_sweep_ends_with_a_time_line_whose_categories_sum_to_its_wall_time(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    result = commbench(
        "sweep",
        "--op",
        "all_reduce",
        "--sizes",
        "8,64K",
        "-o",
        str(out),
        "--history",
        str(tmp_path / "h.sqlite"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("# time:")]
    assert len(lines) == 1, result.stdout
    assert result.stdout.rstrip().endswith(lines[0])  # the run's last line
    parsed = parse_time_line(lines[0])
    assert parsed is not None, lines[0]
    wall, totals = parsed
    assert list(totals) == [*PHASES, OTHER]
    # Each category is printed to 0.01 s: the sum meets the wall time within that rounding.
    assert abs(sum(totals.values()) - wall) <= 0.005 * len(totals) + 0.01
    assert totals["charts"] > 0 and totals["startup"] > 0 and totals["teardown"] > 0, lines[0]
    # What the ranks did is measured inside them, not guessed at: little is left to `other`.
    assert totals[OTHER] < 0.1 * wall, lines[0]
    # Rank 0 recorded its clock beside the CSV, where the line's rank-side figures come from (unrounded:
    # a sweep this small spends milliseconds in some of them).
    record = json.loads(out.with_name("out.env.json").read_text())["phases_s"]
    for measured in ("startup", "setup", "fill", "warmup", "timed", "check", "control", "progress", "history", "write"):
        assert record["totals"][measured] > 0, (measured, record)
    assert record["totals"]["timed"] == pytest.approx(totals["timed"], abs=0.006)
    assert record["began"] < record["ended"]
