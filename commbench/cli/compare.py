"""`commbench compare`: a candidate run against a baseline, with an exit code that can gate CI."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from commbench.cli.options import history_location_option
from commbench.errors import ExitCode

if TYPE_CHECKING:
    from commbench.analysis.verdict import Comparison, Criteria
    from commbench.history.store import History

T = TypeVar("T")


@click.command()
@click.argument("csvs", nargs=-1, metavar="[BASELINE.csv] CANDIDATE.csv", type=click.Path(path_type=Path))
@click.option(
    "--threshold",
    default="5%",
    show_default=True,
    help="Smallest change that counts: a percentage (5%) or an absolute amount in the metric's units (20).",
)
@click.option(
    "--metric",
    default="time_us_mean",
    show_default=True,
    help="Column to compare: time_us_mean (the headline), time_us_min/p50/p95/max (lower is better) or "
    "algbw_gbps/busbw_gbps (higher is better).",
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
    default=None,
    help="Smallest change of a series as a whole (the geometric mean over its sizes) that counts "
    "[default: 20%, against the history the --threshold].",
)
@click.option(
    "--last",
    type=int,
    default=5,
    show_default=True,
    help="With one CSV: how many earlier runs of the history to judge against.",
)
@click.option(
    "--plan",
    default=None,
    metavar="RATIO",
    help="With one CSV: judge nothing; say how many candidate launches (sweep --repeat K) the history's "
    "spread needs to resolve this slowdown (1.2x, or 20%) in each series.",
)
# --history-db: this option's name before every command spelled it --history.
@history_location_option("With one CSV: the history to judge it against", "location", "--history-db")
def compare(
    csvs: tuple[Path, ...],
    threshold: str,
    metric: str,
    alpha: float,
    series_threshold: str | None,
    last: int,
    plan: str | None,
    location: str | None,
) -> None:
    """Compare CANDIDATE.csv against BASELINE.csv row by row, or one CSV against the runs before it
    in the history; exit 1 when anything regressed.

    \b
      commbench compare BASELINE.csv CANDIDATE.csv
      commbench compare [--history PATH|URL] [--last 5] CANDIDATE.csv

    Rows match on (op, variant, phase, dtype, mode, size_bytes, world_size, group). A row is a regression or
    an improvement only when its change exceeds --threshold AND the noise test finds the runs differ
    (p < alpha, Holm-adjusted over the rows): Welch's t-test on the runs' per-round means (per-round p50s with
    --metric time_us_p50; sweeps with --rounds 2 or more, the default), else a Mann-Whitney U test on
    per-iteration samples (--raw), else each run's interval of the mean (or, for files without one, its spread); in a series of 4 sizes or
    more the change must also stand out of the scatter of the series' changes across its sizes (the
    drift between the two runs). Rows found in one run only are listed, not compared. Wrong results in the candidate also fail the comparison.
    Either file may be nccl-tests' -J results.json (docs/history.md).

    Each series (an op/variant/phase over its sizes, 4 or more) is also judged as a whole: its
    geometric-mean change counts when it exceeds --series-threshold and a t-test on the per-size
    log ratios gives p < alpha (Holm over the series). A series regression fails the comparison too.

    \b
    Given one CSV, it is judged against the last --last complete runs of its fingerprint
    (docs/history.md): a row or a series changes only when its change exceeds the threshold and the
    candidate's fastest round lies outside the spread of the history's; with fewer than 3 such runs
    it says so and compares pairwise against the latest.

    Every verdict states its resolution: the smallest change it catches 9 times in 10 at its
    false-alarm rate, from the history's run-to-run spread (pairwise: the two runs' own rounds or
    intervals). A series (or a row outside any judged series) that found no change but resolves
    only changes coarser than its threshold is inconclusive, with the launches that would make it
    conclusive (a CSV of `sweep --repeat K` is pooled as one candidate); --plan 1.2x says how many
    launches the history's spread needs before running them.

    \b
    Exit codes: 0 passed (no regression, and every series resolves its threshold),
    1 regression or wrong results, 2 unusable input, 5 inconclusive (no regression,
    but one could have gone unseen: repeat the candidate as the line says).
    """
    from commbench.analysis.compare import compare_runs
    from commbench.analysis.comparison_text import format_comparison
    from commbench.analysis.verdict import Criteria, Threshold
    from commbench.errors import UserError

    criteria = Criteria(
        metric,
        Threshold.parse(threshold),
        alpha,
        Threshold.parse(series_threshold) if series_threshold is not None else None,
    )
    if location is not None and location.startswith("-"):
        raise UserError(
            f"--history takes the history's location, a SQLite file or a postgresql:// URL (got {location!r})"
        )
    if not csvs and location is not None and location.endswith(".csv"):
        # The form of the versions where --history was a flag: its value is the candidate.
        raise UserError(
            f"--history takes the history's location now; to judge {location} against the history: "
            f"`commbench compare {location}` (or `commbench compare --history PATH|URL {location}`)"
        )
    if plan is not None:
        if len(csvs) != 1:
            raise UserError("--plan takes one CSV of the command to plan for: commbench compare --plan 1.2x RUN.csv")
        click.echo(_plan(csvs[0], location, last, criteria, plan))
        sys.exit(ExitCode.OK)
    if len(csvs) == 1:
        result = _against_history(csvs[0], location, last, criteria)
    elif len(csvs) == 2:
        result = compare_runs(csvs[0], csvs[1], criteria)
    else:
        raise UserError(
            f"compare takes BASELINE.csv CANDIDATE.csv, or one CANDIDATE.csv to judge against the history "
            f"(got {len(csvs)} files)"
        )
    click.echo(format_comparison(result))
    sys.exit(result.exit_code)


def _against_history(candidate: Path, location: str | None, last: int, criteria: Criteria) -> Comparison:
    from commbench.analysis.history_gate import compare_history

    return _with_history(candidate, location, lambda history: compare_history(candidate, history, last, criteria))


def _plan(candidate: Path, location: str | None, last: int, criteria: Criteria, ratio: str) -> str:
    from commbench.analysis.history_gate import parse_ratio, plan_launches, plan_text

    target = parse_ratio(ratio)
    found = _with_history(candidate, location, lambda history: plan_launches(candidate, history, last, criteria))
    return plan_text(found, target)


def _with_history(candidate: Path, location: str | None, use: Callable[[History], T]) -> T:
    from commbench.errors import UserError
    from commbench.history.store import history_location, open_history

    if not candidate.is_file():
        raise UserError(f"results file {candidate} does not exist")
    history = open_history(history_location(location) or "", create=False)
    try:
        return use(history)
    finally:
        history.close()
