"""How a comparison is printed: rows and series named (describe) and the delta table that
`commbench compare` prints (format_comparison)."""

from __future__ import annotations

import math

from commbench.analysis.resolution import format_ratio
from commbench.analysis.verdict import TESTS, Comparison, Shift
from commbench.results.schema import ROW_KEY, SERIES_KEY
from commbench.units import format_size


def describe(key: tuple) -> str:
    """op/variant/phase dtype mode size n=world: how a row (or, without the size, a series) is named
    in compare's output."""
    parts = dict(zip(ROW_KEY if len(key) == len(ROW_KEY) else SERIES_KEY, key))
    size = f"{format_size(int(parts['size_bytes']))} " if "size_bytes" in parts else ""
    return (
        f"{parts['op']}/{parts['variant']}/{parts['phase']} {parts['dtype']} {parts['mode']} "
        f"{size}n={int(parts['world_size'])}" + ("" if parts["group"] == "world" else f" --group {parts['group']}")
    )


def format_comparison(result: Comparison) -> str:
    """The delta table and the lists of rows not compared, as compare prints them."""
    unit = "GB/s" if result.criteria.metric.endswith("gbps") else "us"
    tested = sum(1 for d in result.deltas if d.method)
    lines = [
        f"# compare {result.criteria.metric} ({unit}): baseline {result.baseline_label} -> candidate {result.candidate_label}",
        f"# a row changes only when |change| > {result.criteria.threshold} and the noise test gives p < {result.criteria.alpha:g} "
        f"(p adjusted by Holm's method over the {tested} rows tested)",
        *(f"# noise test {m}: {TESTS[m]}" for m in result.methods),
        *(f"# {note}" for note in result.notes),
        f"# resolves: the smallest ratio each test catches 9 times in 10 at its false-alarm rate, from "
        f"{result.resolution_rule}{_pooled(result)}; where it is coarser than the threshold a verdict that "
        "found no change is inconclusive",
        f"# {'op/variant/phase dtype mode size n':<58} {'baseline':>10} {'candidate':>10} {'change':>8} "
        f"{'p':>7} {'test':>6} {'resolves':>8}  verdict",
    ]
    for d in result.deltas:
        p = "" if math.isnan(d.p_value) else f"{d.p_value:.3g}"
        lines.append(
            f"  {describe(d.key):<58} {d.baseline:>10.4g} {d.candidate:>10.4g} {d.change:>+8.1%} "
            f"{p:>7} {d.method:>6} {_ratio(d.resolution):>8}  {d.verdict}"
        )
    if result.shifts:
        lines.append(
            f"# series as a whole (geometric mean over its sizes; counts when |change| > {result.criteria.series_threshold} "
            f"and {result.series_rule} p < {result.criteria.alpha:g}, Holm over the "
            f"{len(result.shifts)} series):"
        )
        lines.extend(
            f"  {describe(s.key) + f' ({s.sizes} sizes)':<58} {'':>10} {'':>10} {s.change:>+8.1%} "
            f"{s.p_value:>7.3g} {'shift':>6} {_ratio(s.resolution):>8}  {s.verdict}"
            for s in result.shifts
        )
        lines.extend(f"# {series_resolution_line(result, s)}" for s in result.shifts if s.noise is not None)
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
        for v in (
            "regression",
            "improvement",
            "within noise",
            "unchanged",
            "inconclusive",
            "wrong results",
            "wrong in baseline",
            "not judged (stopped)",
        )
        if result.count(v)
    )
    moved = ", ".join(
        f"{result.shift_count(v)} series {v}{'s' if result.shift_count(v) > 1 and v != 'inconclusive' else ''}"
        for v in ("regression", "improvement", "inconclusive")
        if result.shift_count(v)
    )
    # A row the reader could not read was judged by nobody: a pass says how many it did not see.
    unjudged = ", ".join(f"{n} row{'s' if n != 1 else ''} of {label}" for label, n in result.unjudged.items())
    unjudged = f"{unjudged} not judged (cut, malformed or impossible: named above)" if unjudged else ""
    summary = "; ".join(part for part in (counts or "no row compared", moved, unjudged) if part)
    outcome = "FAILED" if result.failed else "INCONCLUSIVE" if result.inconclusive else "passed"
    resolved = [s.resolution for s in result.shifts if not math.isnan(s.resolution)]
    if outcome == "passed" and resolved:
        outcome += f" (every series resolves its threshold; the coarsest {_ratio(max(resolved))})"
    lines.append(f"# {summary}; {outcome}")
    return "\n".join(lines)


def _ratio(value: float) -> str:
    return "" if math.isnan(value) else "inf" if math.isinf(value) else f"{value:.2f}x"


def _pooled(result: Comparison) -> str:
    return f", the candidate's {result.launches} launches pooled" if result.launches > 1 else ""


def series_resolution_line(result: Comparison, shift: Shift) -> str:
    """What a series' verdict could see, and what would make it see a change of the threshold's size:
    `all_gather/flat: -3% +/- 14%; this history resolves 1.38x; a 1.05x needs 9 candidate launches: --repeat 9`."""
    from commbench.analysis.resolution import launches_for

    criteria = result.criteria
    name = f"{shift.key[0]}/{shift.key[1]}" + ("" if shift.key[2] in ("", "comm") else f"/{shift.key[2]}")
    where = "this history" if result.resolution_rule.startswith("the run-to-run") else "this pair of runs"
    pooled = f" with {result.launches} launches" if result.launches > 1 else ""
    head = (
        f"{name}: {shift.change:+.0%} +/- {math.expm1(shift.interval):.0%}; {where}{pooled} resolves "
        f"{format_ratio(shift.resolution)}"
    )
    target = criteria.series_threshold.ratio(1.0)
    if shift.verdict != "inconclusive":
        return f"{head} ({shift.verdict}; the threshold is {target:.2f}x)"
    if shift.noise is None or shift.noise.history_runs == 0:
        return (
            f"{head}; two runs cannot resolve {target:.2f}x here: judge the candidate against a history "
            f"(compare CANDIDATE.csv; compare --plan {target:.2f}x CANDIDATE.csv says how many launches, sweep --repeat K)"
        )
    k = launches_for(target, shift.noise, criteria.alpha, len(result.shifts))
    if k is None:
        return (
            f"{head}; no number of candidate launches resolves {target:.2f}x against "
            f"{shift.noise.history_runs} history runs: judge against more (--last) or at a coarser --series-threshold"
        )
    return f"{head}; a {target:.2f}x needs {k} candidate launches: --repeat {k}"
