"""`commbench compare CANDIDATE.csv` (one CSV): a candidate run judged against the spread of the last N runs of its
fingerprint, rather than against one baseline run.

Between two runs of one command a shared machine drifts: a whole series moved by up to 25% here.
One baseline run cannot show that drift; N runs can. A row (or a series) changes only when its
change exceeds the threshold (as the pairwise test asks) AND the candidate lies outside the spread
the history shows for it:

- the statistic is each run's fastest round (the lowest of its per-round p50s). Interference on a
  shared machine only adds time, and in spells: a spell slows some rounds of a run, while a real
  slowdown slows every round, the fastest included. On runs measured here the fastest round moved
  about half as much between runs as the pooled p50 did.
- a row: the candidate's log fastest round against the history's, as a t prediction interval
  around their median, p Holm-adjusted over the rows. The spread is robust (1.4826 x the median
  absolute deviation: one disturbed run in the history must not hide a change), floored by the
  robust spread pooled over the rows of the series (five values can come out tiny by chance, and
  then the pooled degrees of freedom apply), and widened by the candidate's own round spread (a
  row whose rounds disagree was disturbed while it ran). As in the pairwise test, a row must also
  stand out of its series' changes across sizes;
- a series (4 or more sizes): the mean over its sizes of each run's log deviation from the
  history's per-size median, the candidate's against the history runs', the same way (the floor
  pooled over the series), Holm over the series;
- the fastest rounds must have moved the way the metric did: a p50 that rose while the fastest
  round fell is no evidence of a slowdown.

With fewer than MIN_HISTORY_RUNS earlier runs of the fingerprint the comparison says so and falls
back to the pairwise test against the latest of them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from commbench.analysis.compare import compare_frames, keyed
from commbench.analysis.comparison_text import describe
from commbench.analysis.verdict import (
    DEFAULT_CRITERIA,
    METRICS,
    SERIES_MIN_SIZES,
    Comparison,
    Criteria,
    Delta,
    Shift,
    guard_by_series_scatter,
    series_key,
    unavailable,
    verdict_of,
)
from commbench.errors import UserError
from commbench.history.query import baseline_runs, run_rows, started_at
from commbench.history.store import History
from commbench.results.reader import ROUND_P50S, read_one, read_samples
from commbench.results.schema import STOPPED
from commbench.results.stats import holm, log_sd, pooled_robust_sd, prediction_p

MIN_HISTORY_RUNS = 3
DEFAULT_LAST = 5


def candidate_fingerprint(path: Path, frame: pd.DataFrame) -> str:
    """The candidate's fingerprint: its column, else what its .env.json or the CSV alone give (as
    `history import` files a CSV, so an imported run and its file agree)."""
    given = [f for f in frame["fingerprint"].unique() if f]
    if given:
        return str(given[0])
    from commbench.history.importer import environment

    cells = pd.read_csv(path, dtype=str, keep_default_na=False)
    return str(environment(Path(path), cells)["fingerprint"])


def compare_history(
    candidate: Path,
    history: History,
    last: int = DEFAULT_LAST,
    criteria: Criteria = DEFAULT_CRITERIA,
) -> Comparison:
    """Judge the candidate CSV against the last `last` complete runs of its fingerprint that started
    before it (the candidate itself left out, should it be in the history)."""
    if last < 1:
        raise UserError(f"--last must be at least 1 (got {last})")
    # Against the history a series' threshold defaults to the row's.
    criteria = replace(criteria, series_threshold=criteria.series_threshold or criteria.threshold).checked()
    cand_frame = read_one(candidate)
    run_ids = [r for r in cand_frame["run_id"].unique() if r]
    if len(run_ids) != 1:
        raise UserError(f"{candidate} holds {len(run_ids)} runs; compare one run against the history")
    run_id = str(run_ids[0])
    fingerprint = candidate_fingerprint(candidate, cand_frame)
    stamps = sorted(t for t in cand_frame["timestamp"] if t)
    before = started_at(history, run_id) or (stamps[0] if stamps else None)
    runs = baseline_runs(history, fingerprint, before, run_id, last)
    if not runs:
        raise UserError(
            f"the history {history.label} holds no earlier complete run of fingerprint {fingerprint}: "
            f"nothing to judge {candidate} against (run the same sweep to record one, or compare two CSVs)"
        )
    frames = run_rows(history, [r["run_id"] for r in runs])
    wanted = f"the last {last} runs" if len(runs) >= last else f"{len(runs)} run{'s' if len(runs) > 1 else ''}"
    if len(runs) < MIN_HISTORY_RUNS:
        latest = runs[-1]
        result = compare_frames(
            frames[frames["run_id"] == latest["run_id"]],
            cand_frame,
            f"history run {latest['run_id']} ({latest['started_at']})",
            str(candidate),
            (None, read_samples(candidate)),
            criteria,
        )
        result.notes.append(
            f"the history {history.label} holds {wanted} of fingerprint {fingerprint} before this one "
            f"({MIN_HISTORY_RUNS} needed to judge by its spread): judged pairwise against the latest"
        )
        return result
    result = Comparison(
        criteria,
        f"history {history.label}: {wanted} of fingerprint {fingerprint} ({', '.join(r['run_id'] for r in runs)})",
        str(candidate),
    )
    result.series_rule = "the history's spread of its fastest rounds (mean over sizes) gives"
    _judge(result, keyed(cand_frame, str(candidate)), frames, [r["run_id"] for r in runs])
    result.not_compared.extend(unavailable(frames.iloc[0:0], cand_frame))
    return result


@dataclass
class _Row:
    """One candidate row with the same row in each history run that has it."""

    key: tuple
    candidate: pd.Series
    history: list[pd.Series]


def fastest_round(row: pd.Series) -> float:
    """The lowest of a row's per-round p50s; its p50 where it kept none (one round, version 1)."""
    rounds = row[ROUND_P50S]
    return min(rounds) if rounds else float(row["time_us_p50"])


def _judge(result: Comparison, cand: pd.DataFrame, frames: pd.DataFrame, run_ids: list[str]) -> None:
    per_run = {rid: keyed(frames[frames["run_id"] == rid], f"history run {rid}") for rid in run_ids}
    metric = result.criteria.metric
    rows: list[_Row] = []
    for key in sorted(cand.index):
        c = cand.loc[key]
        if math.isnan(float(c[metric])):
            result.not_compared.append(f"{describe(key)} has no {metric} (latency only)")
            continue
        if c["status"] == STOPPED:
            result.not_compared.append(f"{describe(key)} was stopped before its last round (never checked)")
            continue
        if c["status"] != "ok":
            result.deltas.append(Delta(key, math.nan, float(c[metric]), math.nan, "", "wrong results"))
            continue
        found = [per_run[r].loc[key] for r in run_ids if key in per_run[r].index]
        found = [h for h in found if h["status"] == "ok" and fastest_round(h) > 0]
        if len(found) < MIN_HISTORY_RUNS:
            result.not_compared.append(f"{describe(key)} is in {len(found)} history runs ({MIN_HISTORY_RUNS} needed)")
            continue
        rows.append(_Row(key, c, found))
    logs = {id(r): [math.log(fastest_round(h)) for h in r.history] for r in rows}
    by_series: dict[tuple, list[_Row]] = {}
    for r in rows:
        by_series.setdefault(series_key(r.key), []).append(r)
    tested: list[tuple[Delta, _Row]] = []
    for members in by_series.values():
        floor = pooled_robust_sd([logs[id(r)] for r in members])
        for r in members:
            value = math.log(fastest_round(r.candidate))
            # The candidate's own spread: a row whose rounds disagree was disturbed while it ran.
            p = prediction_p(value, logs[id(r)], floor, log_sd(r.candidate[ROUND_P50S]))
            baseline = statistics.median(float(h[metric]) for h in r.history)
            delta = Delta(r.key, baseline, float(r.candidate[metric]), p, "history", "unchanged")
            if not _same_way(metric, delta.baseline, delta.candidate, value - statistics.median(logs[id(r)])):
                delta.p_value = 1.0  # the rounds moved the other way: no evidence for the change the metric shows
            tested.append((delta, r))
    # As in the pairwise test, a row must also stand out of its series' changes across sizes in this run.
    scatter: dict[tuple, list[tuple[Delta, float]]] = {}
    for delta, r in tested:
        change = math.log(fastest_round(r.candidate)) - statistics.median(logs[id(r)])
        scatter.setdefault(series_key(r.key), []).append((delta, change))
    guard_by_series_scatter(scatter)
    deltas = [d for d, _ in tested]
    for delta, adjusted in zip(deltas, holm([d.p_value for d in deltas])):
        delta.p_value = adjusted
        delta.verdict = verdict_of(
            result.criteria, result.criteria.threshold, delta.baseline, delta.candidate, adjusted, delta.verdict
        )
    result.deltas = sorted([*result.deltas, *deltas], key=lambda d: d.key)
    result.shifts = _series_shifts(result, by_series, run_ids)


def _series_shifts(result: Comparison, by_series: dict[tuple, list[_Row]], run_ids: list[str]) -> list[Shift]:
    """Each series of SERIES_MIN_SIZES or more sizes that every history run measured, judged whole."""
    metric = result.criteria.metric
    stats: dict[tuple, tuple[float, list[float], float, int]] = {}
    for key, members in by_series.items():
        complete = [r for r in members if len(r.history) == len(run_ids)]
        if len(complete) < SERIES_MIN_SIZES:
            continue
        centre = {id(r): statistics.median(math.log(fastest_round(h)) for h in r.history) for r in complete}
        candidate = statistics.fmean(math.log(fastest_round(r.candidate)) - centre[id(r)] for r in complete)
        history = [
            statistics.fmean(math.log(fastest_round(r.history[j])) - centre[id(r)] for r in complete)
            for j in range(len(run_ids))
        ]
        metric_logs = [
            math.log(float(r.candidate[metric]) / statistics.median(float(h[metric]) for h in r.history))
            for r in complete
        ]
        stats[key] = (candidate, history, math.exp(statistics.fmean(metric_logs)), len(complete))
    floor = pooled_robust_sd([h for _, h, _, _ in stats.values()])
    shifts = [
        Shift(
            key,
            sizes,
            ratio,
            prediction_p(value, history, floor)
            if _same_way(metric, 1.0, ratio, value - statistics.median(history))
            else 1.0,
        )
        for key, (value, history, ratio, sizes) in sorted(stats.items())
    ]
    for shift, adjusted in zip(shifts, holm([s.p_value for s in shifts])):
        shift.p_value = adjusted
        shift.verdict = verdict_of(
            result.criteria, result.criteria.series_threshold, 1.0, shift.ratio, adjusted, shift.verdict
        )
    return shifts


def _same_way(metric: str, baseline: float, candidate: float, time_change: float) -> bool:
    """True when the fastest rounds moved (time_change, in log time) the way the metric did: slower
    time where the metric got worse, faster where it got better."""
    worse = (candidate > baseline) != METRICS[metric]
    return (time_change > 0) == worse
