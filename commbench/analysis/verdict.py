"""What a comparison decides, for the pairwise test (analysis/compare.py) and the history gate
(analysis/history_gate.py) alike: the metrics and thresholds, a row's delta and a series' shift with
their verdicts, the noise test that gives a row its p, and the guard by the scatter of a series.

A change is an improvement or a regression only when it exceeds the threshold and its p (Holm-adjusted
over the rows, or the series) is below alpha; one that does not, judged with a resolution coarser
than the threshold (analysis/resolution.py), is inconclusive rather than unchanged. The statistics
are pure functions in results/stats.py, and how a comparison is printed is analysis/comparison_text.py's.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from commbench.analysis.resolution import Noise, conclusive, critical, resolution
from commbench.errors import ExitCode, UserError
from commbench.results.placements import PLACEMENT_PAIRS, PLACEMENT_VAR
from commbench.results.reader import ROUND_MEANS, ROUND_P50S
from commbench.results.schema import ROW_KEY, SERIES_KEY, STOPPED
from commbench.results.stats import (
    HEADLINE,
    HEADLINE_HI,
    HEADLINE_LO,
    MEDIAN_SE_FACTOR,
    interval_p,
    mann_whitney_p,
    normal_p,
    robust_sd,
    rounds_p,
    spread_p,
)

# Metrics compare can gate on, and whether a larger value is better.
METRICS: dict[str, bool] = {
    "time_us_min": False,
    "time_us_p50": False,
    "time_us_mean": False,
    "time_us_p95": False,
    "time_us_max": False,
    "algbw_gbps": True,
    "busbw_gbps": True,
}

TESTS = {
    "rounds": "Welch's t on the logs of each run's per-round means (per-round p50s for the p50; rounds are "
    "independent replicates)",
    "U": "Mann-Whitney U on per-iteration samples (both runs kept --raw; one round each)",
    "interval": "each run's 95% interval of the mean (of the p50 for the p50; one round and no raw samples: "
    "sweep with --rounds 3 or more)",
    "placements": "nccl-tests' out-of-place and in-place times of each size as two samples of one measurement "
    "(their log difference, pooled over each run's sizes, is one time's noise within a run; drift between runs "
    "only several runs in the history show: judge against them)",
    "spread": "the runs' own spread (the mean or p50 and the std over iters; schema version 1 files)",
    "history": "the candidate's fastest round against the spread of the history runs' fastest rounds (a t "
    "prediction interval on logs, the spread floored by the pooled spread of the run's series)",
}


@dataclass(frozen=True)
class Threshold:
    """The smallest change that counts: relative ("5%") or absolute in the metric's units ("20")."""

    value: float
    relative: bool

    @classmethod
    def parse(cls, text: str) -> Threshold:
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*", str(text))
        if not m:
            raise UserError(
                f"malformed threshold {text!r}: use a percentage such as 5% or an absolute "
                f"amount in the metric's units such as 20"
            )
        value = float(m.group(1))
        return cls(value / 100 if m.group(2) else value, bool(m.group(2)))

    def exceeded(self, baseline: float, candidate: float) -> bool:
        diff = abs(candidate - baseline)
        return diff > self.value * abs(baseline) if self.relative else diff > self.value

    def ratio(self, baseline: float) -> float:
        """The threshold as a ratio of the baseline (5% -> 1.05; 20 us of a 100 us row -> 1.2)."""
        return 1 + (self.value if self.relative else self.value / abs(baseline) if baseline else math.inf)

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"


# Back-to-back runs of one command on a shared 2-core machine differed by up to ~17% in a series'
# geometric mean (and once 30%, with no consistent sign across sizes): docs/compare.md.
DEFAULT_SERIES_THRESHOLD = Threshold(0.20, True)


@dataclass(frozen=True)
class Criteria:
    """What a change must pass to count: the metric, the thresholds of a row and of a series, and alpha.

    A threshold left None takes its default when checked (the history gate defaults the series'
    to the row's, the pairwise test to DEFAULT_SERIES_THRESHOLD)."""

    metric: str = HEADLINE
    threshold: Threshold | None = None
    alpha: float = 0.05
    series_threshold: Threshold | None = None

    def checked(self) -> Criteria:
        """These criteria with their defaults; an unknown metric, an alpha outside (0, 1) or an absolute
        series threshold refused in one line."""
        if self.metric not in METRICS:
            raise UserError(f"unknown metric {self.metric!r}; valid metrics: {', '.join(METRICS)}")
        if not 0 < self.alpha < 1:
            raise UserError(f"--alpha must lie between 0 and 1 (got {self.alpha:g})")
        series_threshold = self.series_threshold or DEFAULT_SERIES_THRESHOLD
        if not series_threshold.relative:
            raise UserError(f"--series-threshold takes a percentage such as 20% (got {series_threshold})")
        return replace(self, threshold=self.threshold or Threshold(0.05, True), series_threshold=series_threshold)


DEFAULT_CRITERIA = Criteria()


@dataclass
class Delta:
    """One matched row: the metric in both runs, the change, the noise test's p and the verdict."""

    key: tuple
    baseline: float
    candidate: float
    p_value: float
    method: str
    verdict: str
    resolution: float = math.nan  # the smallest ratio this row's test catches 9 times in 10 (analysis/resolution.py)
    noise: Noise | None = None  # the standard error (log) of the row's change, as its test sees it

    @property
    def change(self) -> float:
        """Relative change of the metric, candidate against baseline."""
        return (self.candidate - self.baseline) / self.baseline if self.baseline else math.nan


# A series (the row key without the size) is judged as a whole from this many sizes on.
SERIES_MIN_SIZES = 4


@dataclass
class Shift:
    """One series judged as a whole: the geometric mean over its sizes of candidate / baseline."""

    key: tuple  # SERIES_KEY
    sizes: int
    ratio: float
    p_value: float
    verdict: str = "unchanged"
    resolution: float = math.nan  # the smallest ratio this series' test catches 9 times in 10
    noise: Noise | None = None  # what the resolution rests on, for the launches a conclusive verdict needs
    interval: float = math.nan  # the 95% half-width of the change (log), as the advice prints it

    @property
    def change(self) -> float:
        return self.ratio - 1


@dataclass
class Comparison:
    """Everything `commbench compare` reports; `failed` decides its exit code."""

    criteria: Criteria  # checked: both thresholds set
    baseline_label: str
    candidate_label: str
    deltas: list[Delta] = field(default_factory=list)
    shifts: list[Shift] = field(default_factory=list)
    only_baseline: list[tuple] = field(default_factory=list)
    only_candidate: list[tuple] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)  # unavailable, or without the metric, with the reason
    unjudged: dict[str, int] = field(
        default_factory=dict
    )  # rows the reader left out (cut, malformed, impossible), by file
    notes: list[str] = field(default_factory=list)  # how the candidate was judged, where that is not pairwise
    series_rule: str = "a t-test on the per-size log ratios gives"  # what a series' change must pass
    launches: int = 1  # the candidate's launches pooled (sweep --repeat K)
    resolution_rule: str = "the two runs' own rounds, intervals or placements"  # what the resolution rests on

    @property
    def inconclusive(self) -> bool:
        """Nothing failed, but a series (or a row outside any judged series) could not have seen a
        change of the threshold's size: neither a pass nor a failure."""
        return not self.failed and (self.count("inconclusive") + self.shift_count("inconclusive") > 0)

    @property
    def exit_code(self) -> int:
        return ExitCode.FAILED if self.failed else ExitCode.INCONCLUSIVE if self.inconclusive else ExitCode.OK

    def count(self, verdict: str) -> int:
        return sum(1 for d in self.deltas if d.verdict == verdict)

    def shift_count(self, verdict: str) -> int:
        return sum(1 for s in self.shifts if s.verdict == verdict)

    @property
    def failed(self) -> bool:
        """A regression (of a row or of a series), or wrong results in the candidate: any of them
        should stop a CI pipeline."""
        return self.count("regression") + self.shift_count("regression") + self.count("wrong results") > 0

    @property
    def methods(self) -> list[str]:
        return sorted({d.method for d in self.deltas if d.method})


def guard_by_series_scatter(series: dict[tuple, list[tuple[Delta, float]]]) -> None:
    """Raise each row's p to the chance that its change is the run-to-run scatter of its series.

    The rounds of one run cannot see how far the machine drifts between two runs. The sizes of a
    series can: between two runs of one command, their log ratios scatter around their median by
    the run-to-run noise of one row. A row's change counts only when it also stands out of that
    scatter (robust scale: 1.4826 x the median absolute deviation; a normal tail). A change that
    moves the whole series keeps the scatter small and stands out at every size; series of fewer
    than SERIES_MIN_SIZES sizes keep their test's p.
    """
    for rows in series.values():
        if len(rows) < SERIES_MIN_SIZES:
            continue
        scale = robust_sd([x for _, x in rows])
        for d, x in rows:
            d.p_value = max(d.p_value, normal_p(x, scale))


def unavailable(baseline: pd.DataFrame, candidate: pd.DataFrame) -> list[str]:
    """Variants that could not run, named once with the run(s) they were missing from."""
    reasons: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for side, frame in (("baseline", baseline), ("candidate", candidate)):
        for _, row in frame[frame["status"] == "unavailable"].iterrows():
            reasons.setdefault((row["op"], row["variant"]), (row["note"], []))[1].append(side)
    return [
        f"{op}/{variant} unavailable in {'both runs' if len(sides) == 2 else 'the ' + sides[0]}: {note}"
        for (op, variant), (note, sides) in sorted(reasons.items())
    ]


@dataclass(frozen=True)
class Estimate:
    """The columns that carry one statistic of a row with its noise: the value, its 95% interval and
    its per-round values (parsed), and its standard error over that of a mean of as many roughly
    normal samples (1 for a mean, sqrt(pi/2) for a median)."""

    value: str
    lo: str
    hi: str
    rounds: str
    se_factor: float


MEAN = Estimate(HEADLINE, HEADLINE_LO, HEADLINE_HI, ROUND_MEANS, 1.0)
P50 = Estimate("time_us_p50", "time_us_p50_lo", "time_us_p50_hi", ROUND_P50S, MEDIAN_SE_FACTOR)


def estimate_of(metric: str) -> Estimate:
    """Whose noise judges a change of `metric`: the p50's for the p50, else the headline's (the
    bandwidths are computed from it; the min, p95 and max carry no interval of their own)."""
    return P50 if metric == P50.value else MEAN


def noise_test_columns(metric: str) -> list[str]:
    """The columns of a row that noise_test reads for `metric`: the metric and its estimate's
    (records of these alone: compare of 100,000 rows builds one per row)."""
    e = estimate_of(metric)
    columns = [metric, "status", e.rounds, e.value, e.lo, e.hi, PLACEMENT_VAR, PLACEMENT_PAIRS, "time_us_std", "iters"]
    return list(dict.fromkeys(columns))


def noise_test(key: tuple, b: Mapping[str, Any], c: Mapping[str, Any], samples: tuple, metric: str) -> Delta:
    """The row's delta with the noise test's own p-value (adjusted over the rows afterwards)."""
    e = estimate_of(metric)
    delta = Delta(key, float(b[metric]), float(c[metric]), math.nan, "", "unchanged")
    if b["status"] != "ok" or c["status"] != "ok":
        statuses = b["status"], c["status"]
        # A stopped case was measured but never checked: neither a regression nor wrong, not judged.
        delta.verdict = (
            "wrong results"
            if c["status"] == "wrong"
            else "wrong in baseline"
            if b["status"] == "wrong"
            else "not judged (stopped)"
            if STOPPED in statuses
            else "wrong in baseline"
        )
        return delta
    rounds = b[e.rounds], c[e.rounds]
    if min(map(len, rounds)) >= 2:
        delta.p_value, delta.method = rounds_p(*rounds), "rounds"
        delta.noise = _rounds_noise(*rounds)
    elif all(s is not None and key in s for s in samples):
        delta.p_value, delta.method = mann_whitney_p(samples[0][key], samples[1][key]), "U"
        delta.noise = Noise(math.hypot(*(_samples_se(s[key], e) for s in samples)), math.inf)
    elif all(_has_interval(row, e) for row in (b, c)):
        delta.p_value, delta.method = interval_p(_interval(b, e), _interval(c, e)), "interval"
        delta.noise = Noise(math.hypot(*(_interval_se(row, e) for row in (b, c))), math.inf)
    elif all(row[PLACEMENT_PAIRS] > 0 for row in (b, c)):  # nccl-tests' rows: one time each, two placements
        change = math.log(c[e.value] / b[e.value])
        delta.p_value, delta.noise = placements_p(change, _placements(b), _placements(c))
        delta.method = "placements"
    else:
        spreads = _spread(b, e), _spread(c, e)
        delta.p_value, delta.method = spread_p(*spreads, e.se_factor), "spread"
        delta.noise = Noise(math.hypot(*(_spread_se(s, e) for s in spreads)), math.inf)
    return delta


def placements_p(change: float, baseline: tuple[float, int], candidate: tuple[float, int]) -> tuple[float, Noise]:
    """Two-sided p and noise of the log change between two rows of nccl-tests, each one time, from
    each run's (variance of one time's log, pairs of placements) (commbench/results/placements.py):
    the variance pooled over both runs' pairs, the change's standard error that of two single times,
    a t with the pairs as degrees of freedom. Pairs that never differed give no spread to judge by:
    p 1 and an infinite noise, so the verdict is inconclusive, never a regression by default."""
    from scipy.special import stdtr

    (var_b, n_b), (var_c, n_c) = baseline, candidate
    pairs = n_b + n_c
    pooled = (var_b * n_b + var_c * n_c) / pairs
    if not pooled > 0:
        return 1.0, Noise(math.inf, pairs)
    se = math.sqrt(2 * pooled)
    return float(2 * stdtr(pairs, -abs(change) / se)), Noise(se, pairs)


def _placements(row: Mapping[str, Any]) -> tuple[float, int]:
    return float(row[PLACEMENT_VAR]), int(row[PLACEMENT_PAIRS])


def _rounds_noise(a: tuple, b: tuple) -> Noise:
    """Welch's standard error of the difference of the runs' mean log round p50s, and its degrees of freedom."""
    va, vb = (_variance([math.log(x) for x in r]) / len(r) for r in (a, b))
    if va + vb == 0:
        return Noise(0.0, math.inf)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return Noise(math.sqrt(va + vb), df)


def _variance(values: list[float]) -> float:
    """The sample variance in floats: statistics.variance's exact fractions cost more than the
    rest of a row's test (compare of 100,000 rows)."""
    mean = math.fsum(values) / len(values)
    return math.fsum((x - mean) ** 2 for x in values) / (len(values) - 1)


def _samples_se(samples: list[float], e: Estimate) -> float:
    """The standard error of the estimate's log from its samples (e.se_factor x that of a log mean)."""
    logs = [math.log(x) for x in samples if x > 0]
    return e.se_factor * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0


def _interval_se(row: Mapping[str, Any], e: Estimate) -> float:
    return (math.log(row[e.hi]) - math.log(row[e.lo])) / (2 * 1.959963984540054)


def _spread_se(spread: tuple[float, float, float], e: Estimate) -> float:
    value, std, iters = spread
    return e.se_factor * std / math.sqrt(max(iters, 1)) / value if value > 0 else math.inf


def verdict_of(
    criteria: Criteria, threshold: Threshold, baseline: float, candidate: float, p: float, unchanged: str
) -> str:
    """A change (of a row, or of a series as the ratio against 1) that exceeds the threshold is an
    improvement or a regression when p < alpha, else within noise; below it, the verdict stays."""
    if not threshold.exceeded(baseline, candidate):
        return unchanged
    if p >= criteria.alpha:
        return "within noise"
    better = (candidate > baseline) == METRICS[criteria.metric]
    return "improvement" if better else "regression"


def resolve(result: Comparison) -> None:
    """Each tested row's and each series' resolution from the noise its test saw (with the
    candidate's launches pooled), and the verdicts that found no change made inconclusive where it
    is coarser than the threshold: a series' by the series threshold; a row's only where its series
    is not judged as a whole (the series is what resolves a slowdown; a row alone rarely can), and
    neither where a row of the series was called a change."""
    criteria, k = result.criteria, result.launches
    tested = [d for d in result.deltas if d.noise is not None]
    for d in tested:
        d.resolution = resolution(d.noise, criteria.alpha, len(tested), k)
    # A series with a row called changed has a finding: what it could not resolve is no longer the question.
    called = {series_key(d.key) for d in result.deltas if d.verdict in ("regression", "improvement")}
    for s in result.shifts:
        if s.noise is None:
            continue
        s.resolution = resolution(s.noise, criteria.alpha, len(result.shifts), k)
        s.interval = critical(0.05, 1, s.noise.df) * s.noise.scale(k)
        if s.key not in called:
            s.verdict = settled(s.verdict, criteria.series_threshold, 1.0, s.resolution)
    judged = {s.key for s in result.shifts if s.noise is not None}
    for d in tested:
        if series_key(d.key) not in judged:
            d.verdict = settled(d.verdict, criteria.threshold, d.baseline, d.resolution)


def settled(verdict: str, threshold: Threshold, baseline: float, resolved: float) -> str:
    """A verdict that found no change, made inconclusive where the test could not have seen a change
    of the threshold's size (its resolution is coarser than the threshold)."""
    if verdict in ("unchanged", "within noise") and not conclusive(resolved, threshold.ratio(baseline)):
        return "inconclusive"
    return verdict


def _has_interval(row: Mapping[str, Any], e: Estimate) -> bool:
    return all(pd.notna(row[c]) and row[c] > 0 for c in (e.value, e.lo, e.hi))


def _interval(row: Mapping[str, Any], e: Estimate) -> tuple[float, float, float]:
    return row[e.value], row[e.lo], row[e.hi]


def _spread(row: Mapping[str, Any], e: Estimate) -> tuple[float, float, float]:
    return row[e.value], row["time_us_std"], row["iters"]


def series_key(key: tuple) -> tuple:
    """A row key without the size: the series the row belongs to."""
    return tuple(v for c, v in zip(ROW_KEY, key) if c in SERIES_KEY)
