"""The end-of-run line about noisy rows: how many, why, and the one option that helps, with its cost."""

from __future__ import annotations

import io
from pathlib import Path
from typing import ClassVar

from commbench.console.display import Display
from commbench.results.budget import Budget
from commbench.results.measurement import Measurement
from commbench.results.noise import NOISE_COLUMNS, HostLoad, summarise_noise
from commbench.results.row_outputs import csv_outputs
from commbench.run.sink import NoiseSummary, Sink


def _row(mean: float, width: float, iters: int, note: str = "") -> dict:
    """A row whose headline (its mean) has an interval `width` wide (a fraction of it)."""
    return {
        "status": "ok",
        "note": note,
        "iters": iters,
        "time_us_min": mean * 0.8,
        "time_us_mean": mean,
        "time_us_mean_lo": mean * (1 - width / 2),
        "time_us_mean_hi": mean * (1 + width / 2),
    }


def test_quiet_rows_need_no_line() -> None:
    assert summarise_noise([_row(300.0, 0.04, 33)], Budget()) is None


def test_rows_the_budget_sizes_are_helped_by_a_larger_budget_with_its_cost() -> None:
    # 300 µs samples: the 0.01 s budget gives ~33 each; intervals 30% wide want ~9x the samples.
    rows = [_row(300.0, 0.30, 33, "noisy: mean interval 30% wide")] * 8 + [_row(300.0, 0.05, 33)] * 2
    summary = summarise_noise(rows, Budget(), wall_s=10.0)
    assert (summary.noisy, summary.measured) == (8, 10)
    assert summary.option == "--time-per-size 0.1"
    # Each row would get 0.1 s / 240 µs (its fastest sample) = 417 samples instead of 33, at
    # 300 µs + 240 µs of barrier each; the run's 10 s scale that work.
    assert summary.cost == "about 2.1 min instead of 10 s"
    assert summary.reason.startswith("too few samples for the machine's spread (median 33 per row")
    line = summary.line()
    assert line.startswith("# 8 of 10 rows are noisy") and "what helps: --time-per-size 0.1" in line


def test_slow_rows_at_the_floor_are_helped_by_more_of_them() -> None:
    rows = [_row(80_000.0, 0.5, 10, "noisy: mean interval 50% wide")] * 4
    summary = summarise_noise(rows, Budget(), wall_s=5.0)
    assert summary.option == "--min-iters 100"  # 25x wanted, at most 10x
    fixed = summarise_noise(rows, Budget(iters=10), wall_s=5.0)
    assert fixed.option == "--iters 100"


def test_the_reason_is_a_busy_host_or_rounds_that_disagree() -> None:
    rows = [_row(300.0, 0.2, 33, "noisy: rounds' means differ 1.6x")] * 3
    assert summarise_noise(rows, Budget(), 3.0, HostLoad(5.0, 2, 2)).reason.startswith(
        "other processes keep this host busy (load average 5.0 on 2 cores, about 3.0 beyond this run's 2 ranks)"
    )
    assert summarise_noise(rows, Budget(), 3.0, HostLoad(2.1, 2, 2)).reason.startswith(
        "the machine's speed changed between rounds (3 of them"
    )


def test_the_sink_prints_the_line_before_it_is_done(tmp_path: Path) -> None:
    out = io.StringIO()
    path, base, display = (
        tmp_path / "r.csv",
        {"run_id": "r", "mode": "blocking", "world_size": 2},
        Display("plain", out),
    )
    sink = Sink(path, base, display, [*csv_outputs(path), NoiseSummary(display, Budget(), base)])
    wide = [[100.0, 300.0, 150.0, 90.0, 400.0, 120.0, 200.0, 110.0, 350.0, 95.0]]
    sink.measured(Measurement("all_gather", "flat", "comm", "float32", 8, 2, None, wide, [], 0, 1, "x", 1))
    sink.finish(0)
    sink.close()
    lines = out.getvalue().splitlines()
    assert lines[-2].startswith("# 1 of 1 rows are noisy") and lines[-1].startswith("# done")


class _Watched(dict):
    """A row that records every column read of it."""

    read: ClassVar[set[str]] = set()

    def get(self, key, default=None):
        _Watched.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        _Watched.read.add(key)
        return super().__getitem__(key)


def test_the_summary_reads_no_column_but_noise_columns() -> None:
    # The report passes records of NOISE_COLUMNS alone: a column read beyond them would read as missing.
    noisy = [_row(300.0, 0.30, 33, "noisy: rounds disagree 1.4x")] * 3 + [_row(9000.0, 0.3, 2, "noisy: mean")] * 2
    rows = [_Watched({**r, "op": "all_reduce", "size_bytes": 4}) for r in [*noisy, _row(300.0, 0.05, 33)]]
    _Watched.read.clear()
    full = summarise_noise(rows, Budget(), wall_s=10.0)
    assert full is not None and {"iters", "note"} <= _Watched.read <= set(NOISE_COLUMNS)
    assert summarise_noise([{c: r[c] for c in NOISE_COLUMNS} for r in rows], Budget(), wall_s=10.0) == full
