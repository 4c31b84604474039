"""Speedups with intervals and verdicts, on synthetic rounds whose answer is known."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pandas as pd

from commbench.analysis.charts.plot import build_charts
from commbench.analysis.speedup import (
    FASTER,
    NO_INTERVAL,
    SLOWER,
    WITHIN_NOISE,
    RowTimes,
    Speedup,
    factor,
    overall,
    paired_speedups,
    speedup_of,
    summarise,
)
from commbench.analysis.syncbn_table import format_table
from commbench.results.reader import read_results
from commbench.results.stats import Stats
from tests.support.synth_results import Case, synth_run


def _row(centre_us: float, rounds: int, seed: int, drift: float = 0.0, sigma: float = 0.03) -> RowTimes:
    """A row measured in `rounds` rounds of 30 samples around centre_us, each round scaled by the
    machine's drift in that round (the same drifts for two rows of one run, as interleaving gives)."""
    rng, drifts = random.Random(seed), random.Random(99)
    blocks = []
    for _ in range(rounds):
        scale = math.exp(drifts.gauss(0.0, drift))
        blocks.append([centre_us * scale * math.exp(rng.gauss(0.0, sigma)) for _ in range(30)])
    stats = Stats.from_samples([t for block in blocks for t in block])
    return RowTimes(
        stats.time_us_mean,
        stats.time_us_mean_lo,
        stats.time_us_mean_hi,
        tuple(statistics.fmean(block) for block in blocks),
    )


def test_a_clear_1_5x_is_called_faster_with_an_interval_around_it() -> None:
    baseline, variant = _row(150.0, 3, seed=1, drift=0.2), _row(100.0, 3, seed=2, drift=0.2)
    speedup = speedup_of(baseline, variant)
    assert speedup.verdict == FASTER
    assert speedup.lo < 1.5 < speedup.hi and speedup.lo > 1.3 and speedup.hi < 1.7, speedup
    # The machine's drift moved both rows alike in each round: the paired ratios cancel it.
    assert speedup.method in ("rounds", "intervals")


def test_1x_within_noise_is_not_called_a_winner() -> None:
    # The same centre, rounds that disagree by tens of percent and are not shared between the rows.
    baseline = RowTimes(100.0, 90.0, 111.0, (80.0, 100.0, 125.0))
    variant = RowTimes(98.0, 88.0, 109.0, (120.0, 95.0, 85.0))
    speedup = speedup_of(baseline, variant)
    assert speedup.verdict == WITHIN_NOISE and speedup.lo < 1.0 < speedup.hi
    assert speedup.method == "rounds"  # the rounds' disagreement is wider than the rows' intervals


def test_a_slower_variant_and_a_file_without_intervals() -> None:
    assert speedup_of(_row(100.0, 3, seed=3), _row(200.0, 3, seed=4)).verdict == SLOWER
    bare = speedup_of(RowTimes(100.0), RowTimes(50.0))  # schema version 1: no rounds, no interval
    assert bare.verdict == NO_INTERVAL and bare.ratio == 2.0 and bare.method == ""


def test_three_rounds_that_agree_by_chance_do_not_make_the_interval_narrower_than_the_rows() -> None:
    baseline = RowTimes(150.0, 120.0, 180.0, (150.0, 150.0, 150.0))
    variant = RowTimes(100.0, 80.0, 120.0, (100.0, 100.0, 100.0))
    speedup = speedup_of(baseline, variant)
    assert speedup.method == "intervals" and speedup.hi / speedup.lo > 1.3


def test_verdicts_merge_neighbouring_workloads_and_name_where() -> None:
    points = [
        Speedup(1.0, 0.8, 1.2, "rounds"),
        Speedup(1.5, 1.3, 1.7, "rounds"),
        Speedup(1.6, 1.4, 1.9, "rounds"),
    ]
    text = summarise([32, 256, 2048], points, "C", lambda v: str(int(v)))
    assert text == "within noise (0.8x-1.2x) at C=32; faster by 1.3x-1.9x at C>=256"
    slower = summarise([8, 16], [Speedup(0.5, 0.4, 0.6, "rounds")] * 2, "S", str)
    assert slower == "slower by 1.7x-2.5x at every S"
    assert [factor(v) for v in (1.003, 0.9996, 1.04, 12.4)] == ["1.003x", "0.9996x", "1.04x", "12x"]


def _frame(rows: list[tuple[str, int, float, tuple[float, ...]]]) -> pd.DataFrame:
    """sync_bn rows of one run: (variant, C, mean, round means), with a 5% interval each."""
    return pd.DataFrame(
        [
            {
                "op": "sync_bn",
                "status": "ok",
                "phase": "forward_backward",
                "count": c,
                "variant": v,
                "time_us_mean": mean,
                "time_us_p50": mean * 0.9,  # beside the headline, as every measured row has it
                "time_us_mean_lo": mean * 0.975,
                "time_us_mean_hi": mean * 1.025,
                "time_us_mean_rounds": ";".join(map(str, rounds)),
                "round_means": rounds,  # as the reader parses the column above
                "run": "r",
                "backend": "gloo",
                "world_size": 2,
                "dtype": "float32",
                "mode": "blocking",
            }
            for v, c, mean, rounds in rows
        ]
    )


SYNCBN_ROWS = [
    ("horovod", 32, 100.0, (100.0, 130.0, 80.0)),
    ("apex", 32, 98.0, (105.0, 90.0, 110.0)),  # within noise of horovod at C=32
    ("torch", 32, 99.0, (95.0, 120.0, 90.0)),
    ("horovod", 256, 300.0, (300.0, 310.0, 295.0)),
    ("apex", 256, 200.0, (200.0, 205.0, 197.0)),  # 1.5x faster, and clearly ahead of torch
    ("torch", 256, 280.0, (281.0, 285.0, 276.0)),
]


def test_the_overall_line_names_the_fastest_and_by_how_much_or_refuses() -> None:
    frame = _frame(SYNCBN_ROWS)
    line = overall(frame, "horovod", "count", "C", lambda v: str(int(v)))
    # apex beats torch at C=256 but not at C=32: no clear winner; against horovod as the verdicts say.
    assert line.startswith("no clear winner; lowest mean: apex; against the runner-up torch: within noise")
    assert "against horovod: within noise" in line and "faster by 1.4x-1.6x at C=256" in line
    decided = _frame([r for r in SYNCBN_ROWS if r[1] == 256])
    assert overall(decided, "horovod", "count", "C", str).startswith(
        "apex is fastest; against the runner-up torch: faster by"
    )


def test_syncbn_summary_prints_intervals_verdicts_and_the_overall_line() -> None:
    lines = format_table(_frame(SYNCBN_ROWS)).splitlines()
    assert lines[1] == "# mean time per phase (µs)"
    speedups = next(i for i, line in enumerate(lines) if line.startswith("# speedup over horovod"))
    assert lines[speedups + 1].split()[1:] == ["phase", "C", "torch", "apex"]
    assert lines[speedups + 3].split()[:3] == ["forward_backward", "256", "1.07x"]
    assert "1.5x (1.4x-1.6x)" in lines[speedups + 3]
    verdicts = [line.strip() for line in lines if line.startswith("  forward_backward ") and ":" in line]
    # C=32: log ratios -0.049, 0.368, -0.318 (sd 0.346) give exp(4.30 x 0.346 / sqrt 3) = 2.36x either side of 1.02x.
    assert verdicts[1] == "forward_backward apex: within noise (0.43x-2.4x) at C=32; faster by 1.4x-1.6x at C=256"
    assert lines[-1].startswith("# overall (forward_backward): no clear winner; lowest mean: apex")


def test_speedup_charts_draw_each_interval_and_say_the_verdicts(tmp_path: Path) -> None:
    cases = [Case("grouped_all_gather", "separate", factor=1.5), Case("grouped_all_gather", "coalesced")]
    run = synth_run(tmp_path / "a.csv", cases, seed=5, raw=False, rounds=3, round_sigma=0.02)
    joined = paired_speedups(read_results([run]), "separate")
    assert (
        (joined["verdict"] == FASTER).all()
        and (joined["speedup_lo"] < 1.5).all()
        and (joined["speedup_hi"] > 1.5).all()
    )
    chart = next(c for c in build_charts(read_results([run])) if c.kind == "speedup")
    (ax,) = chart.figure.axes
    bars = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(bars) == 1 and len(bars[0].lines[2][0].get_segments()) == 4  # an interval at each size
    assert chart.notes[0].startswith("coalesced against separate: faster by")
    assert chart.notes[-1].startswith("overall: coalesced is fastest; against the runner-up separate (the baseline)")
