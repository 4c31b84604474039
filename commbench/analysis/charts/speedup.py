"""The speedup chart of a variant family: each variant's speedup over the baseline with its 95%
interval, and the verdicts a reader can draw from it (commbench/analysis/speedup.py)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from commbench.analysis.charts.axes import bar_group, draw_errors, legend_outside, ratio_axis, size_axis
from commbench.analysis.charts.grouping import RUN_COLUMNS, chart_series, title_facts
from commbench.analysis.charts.layout import ROTATED_LABELS, X_LABELS, grid, suptitle, title_margin
from commbench.analysis.charts.render import Chart
from commbench.analysis.charts.style import Family, op_palette
from commbench.analysis.speedup import WITHIN_NOISE, overall, paired_speedups, variant_verdicts
from commbench.results.reader import ok_rows


def speedups(group: pd.DataFrame, family: Family) -> pd.DataFrame:
    """Mean time (the headline) of the baseline variant / that of each other variant, at equal everything else,
    with its 95% interval (speedup_lo, speedup_hi) and verdict (commbench/analysis/speedup.py).

    Above 1 means the variant is faster than the baseline. Only workloads measured by both count.
    """
    return paired_speedups(group, family.baseline, family.workload)


def _speedup_errors(rows: pd.DataFrame) -> list:
    """Distances from each speedup down to its interval's low end and up to its high end (0 where
    the file gives no interval)."""
    ratio = rows["speedup"].to_numpy(dtype=float)
    lo = rows["speedup_lo"].fillna(rows["speedup"]).to_numpy(dtype=float)
    hi = rows["speedup_hi"].fillna(rows["speedup"]).to_numpy(dtype=float)
    return [ratio - lo, hi - ratio]


def speedup_chart(name: str, group: pd.DataFrame, family: Family) -> Chart | None:
    joined = speedups(group, family)
    if joined.empty:
        return None
    op, phase, baseline, workload = joined["op"].iloc[0], joined["phase"].iloc[0], family.baseline, family.workload
    bars = joined[workload].nunique() == 1
    fig = Figure(figsize=(WIDTH, HEIGHT))
    # The legend hangs right of the panel; variant names under bars are rotated.
    place = grid(
        WIDTH, HEIGHT, top=title_margin(2, panel_titles=0.12), bottom=ROTATED_LABELS if bars else X_LABELS, right=1.9
    )
    ax = fig.subplots(gridspec_kw=place)
    # Each variant keeps the colour it has on the size chart beside this one.
    palette = op_palette(ok_rows(group))
    series = sorted(chart_series(joined), key=palette.order)
    if bars:
        # One workload: bars that start at the baseline (1x), up when faster, down when slower.
        speedup = [float(rows["speedup"].iloc[0]) for _, rows in series]
        firsts = pd.concat([rows.iloc[:1] for _, rows in series])
        bars = bar_group(ax, series, palette, [v - 1 for v in speedup], [f"{v:.2f}x" for v in speedup], bottom=1)
        centres = [bar.get_x() + bar.get_width() / 2 for bar in bars]
        ax.errorbar(centres, speedup, yerr=_speedup_errors(firsts), fmt="none", ecolor="black", capsize=5)
        ax.set_xlabel(f"variant, at {family.workload_name} = {family.format(joined[workload].iloc[0])}")
    else:
        for i, (label, rows) in enumerate(series):
            # Lines a few percent of an octave apart, so that intervals at one workload do not hide each other.
            x = rows[workload] * 2 ** (0.04 * (i - (len(series) - 1) / 2))
            style = palette.style(rows)
            ax.plot(x, rows["speedup"], markersize=5, label=label, **style)
            draw_errors(ax, x, rows["speedup"], _speedup_errors(rows), style["color"])
            undecided = (rows["verdict"] == WITHIN_NOISE).to_numpy()
            ax.plot(
                x[undecided],
                rows["speedup"][undecided],
                linestyle="none",
                marker=style["marker"],
                markersize=5,
                markerfacecolor="white",
                markeredgecolor=style["color"],
                label="_within noise",
            )
        size_axis(ax, joined[workload], family)
        legend_outside(ax)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1, label=f"_{baseline}")
    ratio_axis(ax, [float(v) for v in joined["speedup"]], _interval_ends(joined))
    ax.set_ylabel(f"speedup over {baseline}\n(mean of {baseline} / mean)")
    suptitle(
        fig,
        f"{op} · {phase}: speedup over {baseline} with 95% intervals (above 1 = faster)\n{title_facts(joined)}",
        HEIGHT,
        place,
    )
    note = SPEEDUP_BARS_NOTE if bars else SPEEDUP_NOTE
    fig.text(0.5, -0.02, note, ha="center", fontsize=8, color="dimgray")
    caption = (
        f"{op} ({phase}): each variant's speedup over {baseline} for the same work "
        f"(equal {family.workload_name}), with its 95% interval; above 1 is faster; {title_facts(joined)}."
    )
    return Chart(
        name=f"{name}-speedup", kind="speedup", figure=fig, caption=caption, notes=_verdicts(group, joined, family)
    )


def _verdicts(group: pd.DataFrame, joined: pd.DataFrame, family: Family) -> tuple[str, ...]:
    """Per run on the chart: each variant's verdicts against the baseline and the overall line."""
    measured = ok_rows(group)
    runs = [c for c in RUN_COLUMNS if measured[c].nunique() > 1]
    notes = []
    for key, rows in measured.groupby(runs, sort=True) if runs else [((), measured)]:
        prefix = f"{', '.join(map(str, key if isinstance(key, tuple) else (key,)))}: " if runs else ""
        mine = joined.merge(rows[runs].drop_duplicates(), on=runs) if runs else joined
        variants = [v for v in op_palette(rows).variants if v != family.baseline]
        for variant, text in variant_verdicts(mine, variants, family.workload, family.symbol, family.format):
            notes.append(f"{prefix}{variant} against {family.baseline}: {text}")
        if line := overall(rows, family.baseline, family.workload, family.symbol, family.format):
            notes.append(f"{prefix}overall: {line}")
    return tuple(notes)


WIDTH, HEIGHT = 9, 4.8  # inches
SPEEDUP_NOTE = (
    "Error bars: 95% interval from the per-round paired ratios (docs/charts.md). "
    "Hollow marker: the interval holds 1x, within noise: no winner there."
)
SPEEDUP_BARS_NOTE = (
    "Black bars: 95% interval from the per-round paired ratios (docs/charts.md); "
    "one that holds 1x is within noise: no winner there."
)
# The ratio axis shows the intervals up to this factor beyond the estimates; longer ones run off it.
_INTERVAL_REACH = 4.0


def _interval_ends(joined: pd.DataFrame) -> list[float]:
    """The interval ends the ratio axis makes room for: all of them, but not beyond _INTERVAL_REACH
    of the estimates, so that one useless interval (0.03x-300x) cannot squash every other point."""
    ratios = joined["speedup"]
    low, high = float(ratios.min()) / _INTERVAL_REACH, float(ratios.max()) * _INTERVAL_REACH
    ends = pd.concat([joined["speedup_lo"], joined["speedup_hi"]]).dropna()
    return [min(max(float(v), low), high) for v in ends]
