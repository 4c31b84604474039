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
import statistics
from pathlib import Path

import pandas as pd

from commbench.analysis.comparison_text import describe
from commbench.analysis.resolution import Noise
from commbench.analysis.verdict import (
    DEFAULT_CRITERIA,
    SERIES_MIN_SIZES,
    Comparison,
    Criteria,
    Delta,
    Shift,
    guard_by_series_scatter,
    noise_test,
    noise_test_columns,
    resolve,
    series_key,
    unavailable,
    verdict_of,
)
from commbench.errors import UserError
from commbench.results.reader import read_one, read_samples
from commbench.results.schema import ROW_KEY, key_words
from commbench.results.stats import holm, robust_sd, shift_p


def keyed(frame: pd.DataFrame, path: Path | str) -> pd.DataFrame:
    """Measured rows indexed by the match key; a key seen twice means the file holds two runs."""
    measured = frame[frame["status"] != "unavailable"].copy()
    measured["size_bytes"] = measured["size_bytes"].astype("int64")
    measured["world_size"] = measured["world_size"].astype("int64")
    dup = measured.duplicated(list(ROW_KEY), keep=False)
    if dup.any() and "launch_group" in measured and (measured["launch_group"] != "").all():
        raise UserError(
            f"{path} holds the {measured['run_id'].nunique()} launches of a `--repeat` group: judge it against "
            f"the history, which pools them (commbench compare {path}), or compare two single runs"
        )
    if dup.any():
        raise UserError(
            f"{path} holds {int(dup.sum())} rows that share a key with another (first: "
            f"{describe(tuple(measured[dup].iloc[0][list(ROW_KEY)]))}): compare one run "
            f"against one run"
        )
    return measured.set_index(list(ROW_KEY))


def _nothing_in_common(
    base: pd.DataFrame, cand: pd.DataFrame, baseline: Path | str, candidate: Path | str
) -> UserError:
    """Say which key columns keep the runs apart, so the user sees what to align."""
    apart = []
    for column in ROW_KEY:
        # Each side's distinct values first: a set of every row's value cost seconds at 100,000 rows.
        b, c = (set(side.index.get_level_values(column).unique()) for side in (base, cand))
        if not b & c:
            shown = lambda vs: ",".join(sorted(map(str, vs))[:4])  # noqa: E731
            apart.append(f"{column} {shown(b)} vs {shown(c)}")
    why = "; ".join(apart) if apart else f"no {key_words(ROW_KEY)} is in both"
    return UserError(
        f"{baseline} and {candidate} have no measured row in common ({why}): compare runs of the same ops and sizes"
    )


def compare_runs(baseline: Path, candidate: Path, criteria: Criteria = DEFAULT_CRITERIA) -> Comparison:
    """Match the two runs' rows and classify every change; rows in one run only are kept in lists."""
    criteria.checked()  # before any file is read
    frames = (read_one(baseline), read_one(candidate))
    samples = (read_samples(baseline, frames[0]), read_samples(candidate, frames[1]))
    return compare_frames(*frames, str(baseline), str(candidate), samples, criteria)


def compare_frames(
    base_frame: pd.DataFrame,
    cand_frame: pd.DataFrame,
    baseline: str,
    candidate: str,
    samples: tuple = (None, None),
    criteria: Criteria = DEFAULT_CRITERIA,
) -> Comparison:
    """compare_runs on two runs already read (a baseline from the history has no file)."""
    criteria = criteria.checked()
    metric = criteria.metric
    base, cand = keyed(base_frame, baseline), keyed(cand_frame, candidate)
    common = base.index.intersection(cand.index)
    if common.empty:
        raise _nothing_in_common(base, cand, baseline, candidate)
    result = Comparison(criteria, baseline, candidate)
    for label, frame in ((baseline, base_frame), (candidate, cand_frame)):
        if frame.attrs.get("skipped"):
            result.unjudged[label] = frame.attrs["skipped"]
    result.only_baseline = sorted(base.index.difference(cand.index))
    result.only_candidate = sorted(cand.index.difference(base.index))
    result.not_compared = unavailable(base_frame, cand_frame)
    keys = sorted(common)
    # The rows of both runs in key order, as plain records: one lookup per run, not one per row.
    both = [_records(frame, keys, metric) for frame in (base, cand)]
    for key, b, c in zip(keys, *both):
        if math.isnan(float(b[metric])) and math.isnan(float(c[metric])):
            # A latency-only op (a barrier, S = 0) has no bandwidth to compare.
            result.not_compared.append(f"{describe(key)} has no {metric} (latency only); compare it on a time metric")
            continue
        result.deltas.append(noise_test(key, b, c, samples, metric))
    tested = [d for d in result.deltas if d.method]
    series = _series(tested)
    guard_by_series_scatter(series)
    _widen_by_scatter(series)
    for delta, adjusted in zip(tested, holm([d.p_value for d in tested])):
        delta.p_value = adjusted
        delta.verdict = verdict_of(
            criteria, criteria.threshold, delta.baseline, delta.candidate, adjusted, delta.verdict
        )
    result.shifts = _shifts(series, criteria)
    resolve(result)
    return result


def _records(frame: pd.DataFrame, keys: list[tuple], metric: str) -> list[dict]:
    """The rows of `keys` (each in the frame's index once: keyed() refused duplicates) as records
    holding the columns noise_test reads."""
    columns = noise_test_columns(metric)
    return frame.loc[pd.MultiIndex.from_tuples(keys, names=frame.index.names), columns].to_dict("records")


def _widen_by_scatter(series: dict[tuple, list[tuple[Delta, float]]]) -> None:
    """A row's noise as the guard sees it: its test's standard error, or the scatter of its
    series' changes across sizes where that is wider (the drift the rounds cannot see)."""
    for rows in series.values():
        if len(rows) < SERIES_MIN_SIZES:
            continue
        scatter = robust_sd([x for _, x in rows])
        for d, _ in rows:
            if d.noise is not None and scatter > d.noise.spread:
                d.noise = Noise(scatter, math.inf)


def _series(tested: list[Delta]) -> dict[tuple, list[tuple[Delta, float]]]:
    """The tested rows of each series (the key without the size), each with its log ratio."""
    series: dict[tuple, list[tuple[Delta, float]]] = {}
    for d in tested:
        if d.baseline > 0 and d.candidate > 0:
            series.setdefault(series_key(d.key), []).append((d, math.log(d.candidate / d.baseline)))
    return series


def _shifts(series: dict[tuple, list[tuple[Delta, float]]], criteria: Criteria) -> list[Shift]:
    """Every series with SERIES_MIN_SIZES or more tested rows, judged as a whole (Holm over them)."""
    shifts = []
    for key, rows in sorted(series.items()):
        if len(rows) >= SERIES_MIN_SIZES:
            logs = [x for _, x in rows]
            # The one-sample t's standard error and degrees of freedom: what its resolution rests on.
            noise = Noise(statistics.stdev(logs) / math.sqrt(len(logs)), len(logs) - 1)
            shifts.append(Shift(key, len(logs), math.exp(statistics.fmean(logs)), shift_p(logs), noise=noise))
    for shift, adjusted in zip(shifts, holm([s.p_value for s in shifts])):
        shift.p_value = adjusted
        shift.verdict = verdict_of(criteria, criteria.series_threshold, 1.0, shift.ratio, adjusted, shift.verdict)
    return shifts
