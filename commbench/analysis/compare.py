"""Run-to-run comparison: match rows, measure deltas, and call a change only when it is real.

A row is a regression (or an improvement) only when its change exceeds the threshold *and* the
noise test says the two runs differ (p < alpha, Holm-adjusted over the rows compared). The noise
test is, in order of preference: Welch's t-test on the runs' per-round p50s (rounds are independent
replicates, so their spread includes the machine's drift between them); a Mann-Whitney U test on
per-iteration samples when both runs kept --raw but have one round; each run's p50 interval; the
runs' own spread (p50 and std, version-1 files). The threshold alone would cry wolf on a noisy
machine; the noise test alone would flag 0.5% changes on a quiet one; the adjustment keeps a
comparison of many rows from finding a change by chance. A row must also stand out of the scatter
of its series' changes across sizes, which shows the drift between the two runs that the rounds of
one run cannot see. pytest-benchmark's habit: thresholds are small objects parsed from "5%".

Each series (one op, variant, phase, dtype, mode, world size and group over its sizes) is also
judged as a whole: a slowdown of the transport moves most sizes the same way, while the drift between
two runs moves them every which way. Its geometric-mean ratio counts when it exceeds the series
threshold and a t-test on the per-size log ratios gives p < alpha (Holm over the series): this finds
a 1.5x slowdown that the rows, each alone, cannot separate from a noisy machine.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from commbench.errors import UserError
from commbench.results.reader import ROUND_P50S, read_one, read_samples
from commbench.results.schema import ROW_KEY, SERIES_KEY, key_words
from commbench.results.stats import holm, interval_p, mann_whitney_p, normal_p, robust_sd, rounds_p, shift_p, spread_p
from commbench.units import format_size

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

    metric: str
    threshold: Threshold
    alpha: float
    baseline_label: str
    candidate_label: str
    series_threshold: Threshold = field(default_factory=lambda: DEFAULT_SERIES_THRESHOLD)
    deltas: list[Delta] = field(default_factory=list)
    shifts: list[Shift] = field(default_factory=list)
    only_baseline: list[tuple] = field(default_factory=list)
    only_candidate: list[tuple] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)  # unavailable, or without the metric, with the reason
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


def _keyed(frame: pd.DataFrame, path: Path | str) -> pd.DataFrame:
    """Measured rows indexed by the match key; a key seen twice means the file holds two runs."""
    measured = frame[frame["status"] != "unavailable"].copy()
    measured["size_bytes"] = measured["size_bytes"].astype("int64")
    measured["world_size"] = measured["world_size"].astype("int64")
    dup = measured.duplicated(list(ROW_KEY), keep=False)
    if dup.any():
        raise UserError(
            f"{path} holds {int(dup.sum())} rows that share a key with another (first: "
            f"{describe(tuple(measured[dup].iloc[0][list(ROW_KEY)]))}): compare one run "
            f"against one run"
        )
    return measured.set_index(list(ROW_KEY))


def describe(key: tuple) -> str:
    """op/variant/phase dtype mode size n=world: how a row (or, without the size, a series) is named
    in compare's output."""
    parts = dict(zip(ROW_KEY if len(key) == len(ROW_KEY) else SERIES_KEY, key))
    size = f"{format_size(int(parts['size_bytes']))} " if "size_bytes" in parts else ""
    return (
        f"{parts['op']}/{parts['variant']}/{parts['phase']} {parts['dtype']} {parts['mode']} "
        f"{size}n={int(parts['world_size'])}" + ("" if parts["group"] == "world" else f" --group {parts['group']}")
    )


def _nothing_in_common(
    base: pd.DataFrame, cand: pd.DataFrame, baseline: Path | str, candidate: Path | str
) -> UserError:
    """Say which key columns keep the runs apart, so the user sees what to align."""
    apart = []
    for column in ROW_KEY:
        b, c = set(base.index.get_level_values(column)), set(cand.index.get_level_values(column))
        if not b & c:
            shown = lambda vs: ",".join(sorted(map(str, vs))[:4])  # noqa: E731
            apart.append(f"{column} {shown(b)} vs {shown(c)}")
    why = "; ".join(apart) if apart else f"no {key_words(ROW_KEY)} is in both"
    return UserError(
        f"{baseline} and {candidate} have no measured row in common ({why}): compare runs of the same ops and sizes"
    )


def compare_runs(
    baseline: Path,
    candidate: Path,
    metric: str = "time_us_p50",
    threshold: Threshold | None = None,
    alpha: float = 0.05,
    series_threshold: Threshold | None = None,
) -> Comparison:
    """Match the two runs' rows and classify every change; rows in one run only are kept in lists."""
    checked_options(metric, alpha, threshold, series_threshold)  # before any file is read
    frames = (read_one(baseline), read_one(candidate))
    samples = (read_samples(baseline, frames[0]), read_samples(candidate, frames[1]))
    return compare_frames(
        *frames,
        str(baseline),
        str(candidate),
        samples,
        metric,
        threshold,
        alpha,
        series_threshold,
    )


def checked_options(
    metric: str, alpha: float, threshold: Threshold | None, series_threshold: Threshold | None
) -> tuple[Threshold, Threshold]:
    """The thresholds with their defaults; an unknown metric, an alpha outside (0, 1) or an absolute
    series threshold refused in one line."""
    if metric not in METRICS:
        raise UserError(f"unknown metric {metric!r}; valid metrics: {', '.join(METRICS)}")
    if not 0 < alpha < 1:
        raise UserError(f"--alpha must lie between 0 and 1 (got {alpha:g})")
    series_threshold = series_threshold or DEFAULT_SERIES_THRESHOLD
    if not series_threshold.relative:
        raise UserError(f"--series-threshold takes a percentage such as 20% (got {series_threshold})")
    return threshold or Threshold(0.05, True), series_threshold


def compare_frames(
    base_frame: pd.DataFrame,
    cand_frame: pd.DataFrame,
    baseline: str,
    candidate: str,
    samples: tuple = (None, None),
    metric: str = "time_us_p50",
    threshold: Threshold | None = None,
    alpha: float = 0.05,
    series_threshold: Threshold | None = None,
) -> Comparison:
    """compare_runs on two runs already read (a baseline from the history has no file)."""
    threshold, series_threshold = checked_options(metric, alpha, threshold, series_threshold)
    base, cand = _keyed(base_frame, baseline), _keyed(cand_frame, candidate)
    common = base.index.intersection(cand.index)
    if common.empty:
        raise _nothing_in_common(base, cand, baseline, candidate)
    result = Comparison(metric, threshold, alpha, baseline, candidate, series_threshold)
    result.only_baseline = sorted(base.index.difference(cand.index))
    result.only_candidate = sorted(cand.index.difference(base.index))
    result.not_compared = _unavailable(base_frame, cand_frame)
    for key in sorted(common):
        b, c = base.loc[key], cand.loc[key]
        if math.isnan(float(b[metric])) and math.isnan(float(c[metric])):
            # A latency-only op (a barrier, S = 0) has no bandwidth to compare.
            result.not_compared.append(f"{describe(key)} has no {metric} (latency only); compare it on a time metric")
            continue
        result.deltas.append(_test(key, b, c, samples, result))
    tested = [d for d in result.deltas if d.method]
    series = _series(tested)
    _guard_by_series_scatter(series)
    for delta, adjusted in zip(tested, holm([d.p_value for d in tested])):
        delta.p_value = adjusted
        delta.verdict = _verdict(result, result.threshold, delta.baseline, delta.candidate, adjusted, delta.verdict)
    result.shifts = _shifts(series, result)
    return result


def _series(tested: list[Delta]) -> dict[tuple, list[tuple[Delta, float]]]:
    """The tested rows of each series (the key without the size), each with its log ratio."""
    series: dict[tuple, list[tuple[Delta, float]]] = {}
    for d in tested:
        if d.baseline > 0 and d.candidate > 0:
            key = tuple(v for c, v in zip(ROW_KEY, d.key) if c in SERIES_KEY)
            series.setdefault(key, []).append((d, math.log(d.candidate / d.baseline)))
    return series


def _guard_by_series_scatter(series: dict[tuple, list[tuple[Delta, float]]]) -> None:
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


def _shifts(series: dict[tuple, list[tuple[Delta, float]]], spec: Comparison) -> list[Shift]:
    """Every series with SERIES_MIN_SIZES or more tested rows, judged as a whole (Holm over them)."""
    shifts = []
    for key, rows in sorted(series.items()):
        if len(rows) >= SERIES_MIN_SIZES:
            logs = [x for _, x in rows]
            shifts.append(Shift(key, len(logs), math.exp(statistics.fmean(logs)), shift_p(logs)))
    for shift, adjusted in zip(shifts, holm([s.p_value for s in shifts])):
        shift.p_value = adjusted
        shift.verdict = _verdict(spec, spec.series_threshold, 1.0, shift.ratio, adjusted, shift.verdict)
    return shifts


def _unavailable(baseline: pd.DataFrame, candidate: pd.DataFrame) -> list[str]:
    """Variants that could not run, named once with the run(s) they were missing from."""
    reasons: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for side, frame in (("baseline", baseline), ("candidate", candidate)):
        for _, row in frame[frame["status"] == "unavailable"].iterrows():
            reasons.setdefault((row["op"], row["variant"]), (row["note"], []))[1].append(side)
    return [
        f"{op}/{variant} unavailable in {'both runs' if len(sides) == 2 else 'the ' + sides[0]}: {note}"
        for (op, variant), (note, sides) in sorted(reasons.items())
    ]


def _test(key: tuple, b: pd.Series, c: pd.Series, samples: tuple, spec: Comparison) -> Delta:
    """The row's delta with the noise test's own p-value (adjusted over the rows afterwards)."""
    delta = Delta(key, float(b[spec.metric]), float(c[spec.metric]), math.nan, "", "unchanged")
    if b["status"] != "ok" or c["status"] != "ok":
        delta.verdict = "wrong results" if c["status"] == "wrong" else "wrong in baseline"
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


def _verdict(
    spec: Comparison, threshold: Threshold, baseline: float, candidate: float, p: float, unchanged: str
) -> str:
    """A change (of a row, or of a series as the ratio against 1) that exceeds the threshold is an
    improvement or a regression when p < alpha, else within noise; below it, the verdict stays."""
    if not threshold.exceeded(baseline, candidate):
        return unchanged
    if p >= spec.alpha:
        return "within noise"
    better = (candidate > baseline) == METRICS[spec.metric]
    return "improvement" if better else "regression"


def _has_interval(row: pd.Series) -> bool:
    return all(pd.notna(row[c]) and row[c] > 0 for c in ("time_us_p50", "time_us_p50_lo", "time_us_p50_hi"))


def _interval(row: pd.Series) -> tuple[float, float, float]:
    return row["time_us_p50"], row["time_us_p50_lo"], row["time_us_p50_hi"]


def _spread(row: pd.Series) -> tuple[float, float, float]:
    return row["time_us_p50"], row["time_us_std"], row["iters"]


def format_comparison(result: Comparison) -> str:
    """The delta table and the lists of rows not compared, as compare prints them."""
    unit = "GB/s" if result.metric.endswith("gbps") else "us"
    tested = sum(1 for d in result.deltas if d.method)
    lines = [
        f"# compare {result.metric} ({unit}): baseline {result.baseline_label} -> candidate {result.candidate_label}",
        f"# a row changes only when |change| > {result.threshold} and the noise test gives p < {result.alpha:g} "
        f"(p adjusted by Holm's method over the {tested} rows tested)",
        *(f"# noise test {m}: {TESTS[m]}" for m in result.methods),
        *(f"# {note}" for note in result.notes),
        f"# {'op/variant/phase dtype mode size n':<58} {'baseline':>10} {'candidate':>10} {'change':>8} "
        f"{'p':>7} {'test':>6}  verdict",
    ]
    for d in result.deltas:
        p = "" if math.isnan(d.p_value) else f"{d.p_value:.3g}"
        lines.append(
            f"  {describe(d.key):<58} {d.baseline:>10.4g} {d.candidate:>10.4g} {d.change:>+8.1%} "
            f"{p:>7} {d.method:>6}  {d.verdict}"
        )
    if result.shifts:
        lines.append(
            f"# series as a whole (geometric mean over its sizes; counts when |change| > {result.series_threshold} "
            f"and {result.series_rule} p < {result.alpha:g}, Holm over the "
            f"{len(result.shifts)} series):"
        )
        lines.extend(
            f"  {describe(s.key) + f' ({s.sizes} sizes)':<58} {'':>10} {'':>10} {s.change:>+8.1%} "
            f"{s.p_value:>7.3g} {'shift':>6}  {s.verdict}"
            for s in result.shifts
        )
    for title, keys in (
        ("only in the baseline", result.only_baseline),
        ("only in the candidate", result.only_candidate),
    ):
        if keys:
            lines.append(f"# {title} ({len(keys)} rows, not compared):")
            lines.extend(f"  {describe(k)}" for k in keys)
    lines.extend(f"# not compared: {note}" for note in result.not_compared)
    plural = {"regression": "regressions", "improvement": "improvements"}
    counts = ", ".join(
        f"{result.count(v)} {plural.get(v, v) if result.count(v) > 1 else v}"
        for v in ("regression", "improvement", "within noise", "unchanged", "wrong results", "wrong in baseline")
        if result.count(v)
    )
    moved = ", ".join(
        f"{result.shift_count(v)} series {v}{'s' if result.shift_count(v) > 1 else ''}"
        for v in ("regression", "improvement")
        if result.shift_count(v)
    )
    summary = "; ".join(part for part in (counts or "no row compared", moved) if part)
    lines.append(f"# {summary}; {'FAILED' if result.failed else 'passed'}")
    return "\n".join(lines)
