"""How a comparison is printed: rows and series named (describe) and the delta table that
`commbench compare` prints (format_comparison)."""

from __future__ import annotations

import math

from commbench.analysis.verdict import TESTS, Comparison
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
            f"# series as a whole (geometric mean over its sizes; counts when |change| > {result.criteria.series_threshold} "
            f"and {result.series_rule} p < {result.criteria.alpha:g}, Holm over the "
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
        for v in (
            "regression",
            "improvement",
            "within noise",
            "unchanged",
            "wrong results",
            "wrong in baseline",
            "not judged (stopped)",
        )
        if result.count(v)
    )
    moved = ", ".join(
        f"{result.shift_count(v)} series {v}{'s' if result.shift_count(v) > 1 else ''}"
        for v in ("regression", "improvement")
        if result.shift_count(v)
    )
    # A row the reader could not read was judged by nobody: a pass says how many it did not see.
    unjudged = ", ".join(f"{n} row{'s' if n != 1 else ''} of {label}" for label, n in result.unjudged.items())
    unjudged = f"{unjudged} not judged (cut, malformed or impossible: named above)" if unjudged else ""
    summary = "; ".join(part for part in (counts or "no row compared", moved, unjudged) if part)
    lines.append(f"# {summary}; {'FAILED' if result.failed else 'passed'}")
    return "\n".join(lines)
