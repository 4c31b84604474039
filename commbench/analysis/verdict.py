"""What a comparison decides, for the pairwise test (analysis/compare.py) and the history gate
(analysis/history_gate.py) alike: the metrics and thresholds, a row's delta and a series' shift with
their verdicts, the noise test that gives a row its p, and the guard by the scatter of a series.

A change is an improvement or a regression only when it exceeds the threshold and its p (Holm-adjusted
over the rows, or the series) is below alpha; the statistics are pure functions in results/stats.py,
and how a comparison is printed is analysis/comparison_text.py's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from commbench.errors import UserError
from commbench.results.reader import ROUND_P50S
from commbench.results.schema import ROW_KEY, SERIES_KEY, STOPPED
from commbench.results.stats import interval_p, mann_whitney_p, normal_p, robust_sd, rounds_p, spread_p

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
    "rounds": "Welch's t on the logs of each run's per-round p50s (rounds are independent replicates)",
    "U": "Mann-Whitney U on per-iteration samples (both runs kept --raw; one round each)",
    "interval": "each run's p50 95% interval (one round and no raw samples: sweep with --rounds 3 or more)",
    "spread": "the runs' own spread (p50 and std over iters; schema version 1 files)",
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

    metric: str = "time_us_p50"
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


# The columns of a row that noise_test reads, beside the metric.
NOISE_TEST_COLUMNS = ("status", ROUND_P50S, "time_us_p50", "time_us_p50_lo", "time_us_p50_hi", "time_us_std", "iters")


def noise_test(key: tuple, b: Mapping[str, Any], c: Mapping[str, Any], samples: tuple, metric: str) -> Delta:
    """The row's delta with the noise test's own p-value (adjusted over the rows afterwards)."""
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
    rounds = b[ROUND_P50S], c[ROUND_P50S]
    if min(map(len, rounds)) >= 2:
        delta.p_value, delta.method = rounds_p(*rounds), "rounds"
    elif all(s is not None and key in s for s in samples):
        delta.p_value, delta.method = mann_whitney_p(samples[0][key], samples[1][key]), "U"
    elif all(_has_interval(row) for row in (b, c)):
        delta.p_value, delta.method = interval_p(_interval(b), _interval(c)), "interval"
    else:
        delta.p_value, delta.method = spread_p(_spread(b), _spread(c)), "spread"
    return delta


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


def _has_interval(row: Mapping[str, Any]) -> bool:
    return all(pd.notna(row[c]) and row[c] > 0 for c in ("time_us_p50", "time_us_p50_lo", "time_us_p50_hi"))


def _interval(row: Mapping[str, Any]) -> tuple[float, float, float]:
    return row["time_us_p50"], row["time_us_p50_lo"], row["time_us_p50_hi"]


def _spread(row: Mapping[str, Any]) -> tuple[float, float, float]:
    return row["time_us_p50"], row["time_us_std"], row["iters"]


def series_key(key: tuple) -> tuple:
    """A row key without the size: the series the row belongs to."""
    return tuple(v for c, v in zip(ROW_KEY, key) if c in SERIES_KEY)
