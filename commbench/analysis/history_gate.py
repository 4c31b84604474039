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
from commbench.analysis.resolution import Noise, history_noise, pooled_p
from commbench.analysis.verdict import (
    DEFAULT_CRITERIA,
    METRICS,
    SERIES_MIN_SIZES,
    Comparison,
    Criteria,
    Delta,
    Shift,
    guard_by_series_scatter,
    resolve,
    series_key,
    unavailable,
    verdict_of,
)
from commbench.errors import UserError
from commbench.history.query import baseline_runs, run_rows, started_at
from commbench.history.store import History
from commbench.results.reader import ROUND_P50S, read_one, read_samples
from commbench.results.schema import STOPPED
from commbench.results.stats import holm, log_sd, pooled_robust_sd

MIN_HISTORY_RUNS = 3
DEFAULT_LAST = 5


def candidate_fingerprint(path: Path, frame: pd.DataFrame) -> str:
    """The candidate's fingerprint: its column, else what its .env.json or the CSV alone give (as
    `history import` files a CSV, so an imported run and its file agree)."""
    given = [f for f in frame["fingerprint"].unique() if f]
    if given:
        return str(given[0])
    from commbench.history.importer import fingerprint_of

    return fingerprint_of(Path(path))


def compare_history(
    candidate: Path,
    history: History,
    last: int = DEFAULT_LAST,
    criteria: Criteria = DEFAULT_CRITERIA,
) -> Comparison:
    """Judge the candidate CSV against the last `last` complete runs of its fingerprint that started
    before it (the candidate itself left out, should it be in the history). A CSV of `sweep
    --repeat K` holds K launches of one group: they are pooled as one candidate."""
    if last < 1:
        raise UserError(f"--last must be at least 1 (got {last})")
    # Against the history a series' threshold defaults to the row's.
    criteria = replace(criteria, series_threshold=criteria.series_threshold or criteria.threshold).checked()
    cand_frame = read_one(candidate)
    run_ids = candidate_launches(candidate, cand_frame)
    fingerprint = candidate_fingerprint(candidate, cand_frame)
    stamps = sorted(t for t in cand_frame["timestamp"] if t)
    starts = [s for s in (started_at(history, r) for r in run_ids) if s]
    before = min(starts) if starts else (stamps[0] if stamps else None)
    runs = [r for r in baseline_runs(history, fingerprint, before, None, last) if r["run_id"] not in run_ids]
    if not runs:
        raise UserError(
            f"the history {history.label} holds no earlier complete run of fingerprint {fingerprint}: "
            f"nothing to judge {candidate} against (run the same sweep to record one, or compare two CSVs)"
        )
    frames = run_rows(history, [r["run_id"] for r in runs])
    wanted = f"the last {last} runs" if len(runs) >= last else f"{len(runs)} run{'s' if len(runs) > 1 else ''}"
    if len(runs) < MIN_HISTORY_RUNS:
        if len(run_ids) > 1:
            raise UserError(
                f"the history {history.label} holds {wanted} of fingerprint {fingerprint} before {candidate} "
                f"({MIN_HISTORY_RUNS} needed to pool its {len(run_ids)} launches against): record more runs first"
            )
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
    launches = f"{len(run_ids)} launches pooled" if len(run_ids) > 1 else "one launch"
    result = Comparison(
        criteria,
        f"history {history.label}: {wanted} of fingerprint {fingerprint} ({', '.join(r['run_id'] for r in runs)})",
        f"{candidate} ({launches})",
        launches=len(run_ids),
        resolution_rule=f"the run-to-run spread of these {len(runs)} history runs",
    )
    result.series_rule = "the history's spread of its fastest rounds (mean over sizes) gives"
    cands = [keyed(cand_frame[cand_frame["run_id"] == r], f"{candidate} launch {r}") for r in run_ids]
    _judge(result, cands, frames, [r["run_id"] for r in runs])
    resolve(result)
    result.not_compared.extend(unavailable(frames.iloc[0:0], cand_frame))
    return result


def candidate_launches(path: Path, frame: pd.DataFrame) -> list[str]:
    """The candidate's run ids: one run, or the launches of one `sweep --repeat` group."""
    run_ids = [str(r) for r in dict.fromkeys(frame["run_id"]) if r]
    groups = {str(g) for g in frame["launch_group"] if g}
    if len(run_ids) > 1 and (len(groups) != 1 or any(not g for g in frame["launch_group"])):
        raise UserError(
            f"{path} holds {len(run_ids)} runs that are not the launches of one `sweep --repeat` group; "
            "compare one run (or one group) against the history"
        )
    if not run_ids:
        raise UserError(f"{path} holds no run id; compare one run against the history")
    return run_ids


@dataclass
class _Row:
    """One candidate row (one per launch that measured it) with the same row in each history run that has it."""

    key: tuple
    candidates: list[pd.Series]
    history: list[pd.Series]

    @property
    def value(self) -> float:
        """The candidate's log fastest round, the median over its launches: the history's centre is
        a median too, and a launch's offset is skewed (interference only adds time), so a mean of K
        launches would drift above the history's median as K grows and cry wolf."""
        return statistics.median(math.log(fastest_round(c)) for c in self.candidates)


def fastest_round(row: pd.Series) -> float:
    """The lowest of a row's per-round p50s; its p50 where it kept none (one round, version 1)."""
    rounds = row[ROUND_P50S]
    return min(rounds) if rounds else float(row["time_us_p50"])


def _judge(result: Comparison, cands: list[pd.DataFrame], frames: pd.DataFrame, run_ids: list[str]) -> None:
    per_run = {rid: keyed(frames[frames["run_id"] == rid], f"history run {rid}") for rid in run_ids}
    metric, k = result.criteria.metric, result.launches
    rows: list[_Row] = []
    for key in sorted(set().union(*(c.index for c in cands))):
        mine = [c.loc[key] for c in cands if key in c.index]
        c = mine[0]
        if math.isnan(float(c[metric])):
            result.not_compared.append(f"{describe(key)} has no {metric} (latency only)")
            continue
        if any(m["status"] == STOPPED for m in mine):
            result.not_compared.append(f"{describe(key)} was stopped before its last round (never checked)")
            continue
        if any(m["status"] != "ok" for m in mine):
            result.deltas.append(Delta(key, math.nan, float(c[metric]), math.nan, "", "wrong results"))
            continue
        if len(mine) < k:
            result.not_compared.append(f"{describe(key)} is in {len(mine)} of the {k} launches (all needed to pool)")
            continue
        found = [per_run[r].loc[key] for r in run_ids if key in per_run[r].index]
        found = [h for h in found if h["status"] == "ok" and fastest_round(h) > 0]
        if len(found) < MIN_HISTORY_RUNS:
            result.not_compared.append(f"{describe(key)} is in {len(found)} history runs ({MIN_HISTORY_RUNS} needed)")
            continue
        rows.append(_Row(key, mine, found))
    logs = {id(r): [math.log(fastest_round(h)) for h in r.history] for r in rows}
    by_series: dict[tuple, list[_Row]] = {}
    for r in rows:
        by_series.setdefault(series_key(r.key), []).append(r)
    tested: list[tuple[Delta, _Row]] = []
    for members in by_series.values():
        floor = pooled_robust_sd([logs[id(r)] for r in members])
        for r in members:
            # The candidate's own spread: a row whose rounds disagree was disturbed while it ran.
            own = statistics.fmean(log_sd(c[ROUND_P50S]) for c in r.candidates)
            noise = history_noise(logs[id(r)], floor, own)
            baseline = statistics.median(float(h[metric]) for h in r.history)
            candidate = math.exp(statistics.fmean(math.log(float(c[metric])) for c in r.candidates))
            delta = Delta(
                r.key,
                baseline,
                candidate,
                pooled_p(r.value, logs[id(r)], noise, k),
                "history",
                "unchanged",
                noise=noise,
            )
            if not _same_way(metric, delta.baseline, delta.candidate, r.value - statistics.median(logs[id(r)])):
                delta.p_value = 1.0  # the rounds moved the other way: no evidence for the change the metric shows
            tested.append((delta, r))
    # As in the pairwise test, a row must also stand out of its series' changes across sizes in this run.
    scatter: dict[tuple, list[tuple[Delta, float]]] = {}
    for delta, r in tested:
        scatter.setdefault(series_key(r.key), []).append((delta, r.value - statistics.median(logs[id(r)])))
    guard_by_series_scatter(scatter)
    deltas = [d for d, _ in tested]
    for delta, adjusted in zip(deltas, holm([d.p_value for d in deltas])):
        delta.p_value = adjusted
        delta.verdict = verdict_of(
            result.criteria, result.criteria.threshold, delta.baseline, delta.candidate, adjusted, delta.verdict
        )
    result.deltas = sorted([*result.deltas, *deltas], key=lambda d: d.key)
    result.shifts = _series_shifts(result, by_series, run_ids)


def series_offsets(members: list[_Row], runs: int) -> tuple[float, list[float], list[_Row]] | None:
    """A series' candidate offset (the mean over its sizes of the log deviation from the history's
    per-size median; the median of its launches' offsets), each history run's, and the rows
    they rest on; None when fewer than SERIES_MIN_SIZES sizes are in every history run."""
    found = history_offsets(members, runs)
    if found is None:
        return None
    history, complete, centre = found
    launches = len(complete[0].candidates)
    per_launch = [
        statistics.fmean(math.log(fastest_round(r.candidates[j])) - centre[id(r)] for r in complete)
        for j in range(launches)
    ]
    return statistics.median(per_launch), history, complete


def history_offsets(members: list[_Row], runs: int) -> tuple[list[float], list[_Row], dict[int, float]] | None:
    """Each history run's offset of a series, the rows it rests on and their per-size log medians."""
    complete = [r for r in members if len(r.history) == runs]
    if len(complete) < SERIES_MIN_SIZES:
        return None
    centre = {id(r): statistics.median(math.log(fastest_round(h)) for h in r.history) for r in complete}
    history = [
        statistics.fmean(math.log(fastest_round(r.history[j])) - centre[id(r)] for r in complete) for j in range(runs)
    ]
    return history, complete, centre


@dataclass(frozen=True)
class SeriesPlan:
    """One series' run-to-run noise in a history, and how many series a verdict judges beside it."""

    key: tuple
    noise: Noise
    tests: int
    alpha: float


def plan_launches(candidate: Path, history: History, last: int, criteria: Criteria) -> list[SeriesPlan]:
    """The run-to-run noise of each series of the candidate's command in the last `last` runs of its
    fingerprint: what `compare --plan` turns into the launches a slowdown needs."""
    frame = read_one(candidate)
    wanted = keyed(frame[frame["run_id"] == frame["run_id"].iloc[0]], str(candidate)).index
    return series_plans(history, candidate_fingerprint(candidate, frame), list(wanted), last, criteria)


def series_plans(
    history: History,
    fingerprint: str,
    wanted: list[tuple],
    last: int,
    criteria: Criteria,
    before: str | None = None,
    exclude: str | None = None,
) -> list[SeriesPlan]:
    """The noise of each series among the rows `wanted` in the last `last` complete runs of a
    fingerprint (that started before `before`, `exclude` left out), as the gate would measure it."""
    criteria = replace(criteria, series_threshold=criteria.series_threshold or criteria.threshold).checked()
    runs = baseline_runs(history, fingerprint, before, exclude, last)
    if len(runs) < MIN_HISTORY_RUNS:
        raise UserError(
            f"the history {history.label} holds {len(runs)} complete run(s) of fingerprint {fingerprint} "
            f"({MIN_HISTORY_RUNS} needed to plan from its spread): run the command a few more times first"
        )
    run_ids = [r["run_id"] for r in runs]
    frames = run_rows(history, run_ids)
    per_run = {rid: keyed(frames[frames["run_id"] == rid], f"history run {rid}") for rid in run_ids}
    by_series: dict[tuple, list[_Row]] = {}
    for key in sorted(wanted):
        found = [per_run[r].loc[key] for r in run_ids if key in per_run[r].index]
        found = [h for h in found if h["status"] == "ok" and fastest_round(h) > 0]
        by_series.setdefault(series_key(key), []).append(_Row(key, [], found))
    offsets = {k: o[0] for k, m in by_series.items() if (o := history_offsets(m, len(run_ids))) is not None}
    if not offsets:
        raise UserError(
            f"no series has {SERIES_MIN_SIZES} or more sizes in every one of the last {len(run_ids)} runs "
            f"of fingerprint {fingerprint}: nothing to plan from"
        )
    floor = pooled_robust_sd(list(offsets.values()))
    return [SeriesPlan(k, history_noise(h, floor), len(offsets), criteria.alpha) for k, h in sorted(offsets.items())]


def parse_ratio(text: str) -> float:
    """'1.2x' or '20%' as the ratio 1.2; refused in one line unless above 1."""
    cleaned = str(text).strip().lower()
    try:
        ratio = 1 + float(cleaned[:-1]) / 100 if cleaned.endswith("%") else float(cleaned.removesuffix("x"))
    except ValueError:
        ratio = math.nan
    if not ratio > 1:
        raise UserError(f"--plan takes a slowdown to resolve, such as 1.2x or 20% (got {text!r})")
    return ratio


def plan_text(plans: list[SeriesPlan], target: float) -> str:
    """Per series: its run-to-run spread, what one launch resolves and the launches `target` needs
    against this history and against one twice as long (each spread planned at its upper bound:
    resolution.planning_noise); then the K to run (the most any series needs), with its --last."""
    from commbench.analysis.resolution import PLAN_CONFIDENCE, format_ratio, launches_for, resolution

    n = plans[0].noise.history_runs
    longer = 2 * n
    lines = [
        f"# plan: the candidate launches that resolve {target:.2f}x against {n} history runs (90% power; "
        f"each spread planned at its {PLAN_CONFIDENCE:.0%} upper bound)"
    ]
    needs, needs_longer = [], []
    for p in plans:
        k = launches_for(target, p.noise, p.alpha, p.tests)
        k_longer = launches_for(target, p.noise, p.alpha, p.tests, history_runs=longer)
        needs.append(k)
        needs_longer.append(k_longer)
        one = format_ratio(resolution(p.noise, p.alpha, p.tests))
        lines.append(
            f"  {describe(p.key)}: run-to-run sd {math.expm1(p.noise.spread):.1%}; one launch resolves {one}; "
            + (f"{target:.2f}x needs {_launches(k)}" if k else "no number of launches resolves it")
            + f" (against {longer} runs: {_launches(k_longer) if k_longer else 'none resolves it'})"
        )
    at_longer = None if None in needs_longer else max(needs_longer)
    then = (
        f"; against {longer} runs (--last {longer}, once the history holds them): --repeat {at_longer}"
        if at_longer is not None
        else ""
    )
    if None in needs:
        lines.append(
            f"# no --repeat resolves {target:.2f}x in every series against {n} runs{then or ': record more runs (--last) or plan for a larger change'}"
        )
    else:
        lines.append(f"# recommended: --repeat {max(needs)} (with --last {n}){then}")
    return "\n".join(lines)


def _launches(k: int | None) -> str:
    return f"{k} launch{'es' if k != 1 else ''}"


def _series_shifts(result: Comparison, by_series: dict[tuple, list[_Row]], run_ids: list[str]) -> list[Shift]:
    """Each series of SERIES_MIN_SIZES or more sizes that every history run measured, judged whole."""
    metric = result.criteria.metric
    stats: dict[tuple, tuple[float, list[float], float, int]] = {}
    for key, members in by_series.items():
        found = series_offsets(members, len(run_ids))
        if found is None:
            continue
        candidate, history, complete = found
        metric_logs = [
            statistics.fmean(math.log(float(c[metric])) for c in r.candidates)
            - math.log(statistics.median(float(h[metric]) for h in r.history))
            for r in complete
        ]
        stats[key] = (candidate, history, math.exp(statistics.fmean(metric_logs)), len(complete))
    floor = pooled_robust_sd([h for _, h, _, _ in stats.values()])
    shifts = []
    for key, (value, history, ratio, sizes) in sorted(stats.items()):
        noise = history_noise(history, floor)
        same = _same_way(metric, 1.0, ratio, value - statistics.median(history))
        p = pooled_p(value, history, noise, result.launches) if same else 1.0
        shifts.append(Shift(key, sizes, ratio, p, noise=noise))
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
