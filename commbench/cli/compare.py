"""`commbench compare`: a candidate run against a baseline, with an exit code that can gate CI."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from commbench.errors import ExitCode


@click.command()
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("candidate", type=click.Path(path_type=Path))
@click.option(
    "--threshold",
    default="5%",
    show_default=True,
    help="Smallest change that counts: a percentage (5%) or an absolute amount in the metric's units (20).",
)
@click.option(
    "--metric",
    default="time_us_p50",
    show_default=True,
    help="Column to compare: time_us_min/p50/mean/p95/max (lower is better) or algbw_gbps/busbw_gbps (higher is better).",
)
@click.option(
    "--alpha",
    type=float,
    default=0.05,
    show_default=True,
    help="Significance level of the noise test over all rows (Holm): a change counts only when p < alpha.",
)
@click.option(
    "--series-threshold",
    default="20%",
    show_default=True,
    help="Smallest change of a series as a whole (the geometric mean over its sizes) that counts.",
)
def compare(baseline: Path, candidate: Path, threshold: str, metric: str, alpha: float, series_threshold: str) -> None:
    """Compare CANDIDATE.csv against BASELINE.csv row by row; exit 1 when anything regressed.

    Rows match on (op, variant, phase, dtype, mode, size_bytes, world_size). A row is a regression or
    an improvement only when its change exceeds --threshold AND the noise test finds the runs differ
    (p < alpha, Holm-adjusted over the rows): Welch's t-test on the runs' per-round p50s (sweeps with
    --rounds 2 or more, the default), else a Mann-Whitney U test on per-iteration samples (--raw),
    else each run's p50 interval (or, for version-1 files, its spread); in a series of 4 sizes or
    more the change must also stand out of the scatter of the series' changes across its sizes (the
    drift between the two runs). Rows found in one run only are listed, not compared. Wrong results in the candidate also fail the comparison.

    Each series (an op/variant/phase over its sizes, 4 or more) is also judged as a whole: its
    geometric-mean change counts when it exceeds --series-threshold and a t-test on the per-size
    log ratios gives p < alpha (Holm over the series). A series regression fails the comparison too.

    \b
    Exit codes: 0 no regression, 1 regression or wrong results, 2 unusable input.
    """
    from commbench.analysis.compare import Threshold, compare_runs, format_comparison

    result = compare_runs(
        baseline, candidate, metric, Threshold.parse(threshold), alpha, Threshold.parse(series_threshold)
    )
    click.echo(format_comparison(result))
    sys.exit(ExitCode.FAILED if result.failed else ExitCode.OK)
