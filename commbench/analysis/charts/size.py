"""The size chart: latency and busbw against size (or bars when every row has one size), with
small multiples of each variant's bands when too many lines share the latency panel."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from commbench.analysis.charts.axes import (
    bar_group,
    draw_band,
    draw_interval,
    interval_errors,
    latency_axis,
    legend_outside,
    size_axis,
)
from commbench.analysis.charts.grouping import chart_series, is_latency_only, left_out_note, title_facts
from commbench.analysis.charts.layout import (
    ROTATED_LABELS,
    X_LABELS,
    Y_LABELS,
    grid,
    shared_labels,
    suptitle,
    title_margin,
)
from commbench.analysis.charts.render import Chart
from commbench.analysis.charts.style import Palette, op_palette
from commbench.results.reader import ok_rows
from commbench.results.stats import HEADLINE
from commbench.units import format_size

# The chart's geometry, in inches (charts/layout.py): the overview's height, the room its legend
# takes to the right of the panels, and each small multiple's title and tick labels (7 points)
# with the shared x label under them.
TOP = 4.8
LEGEND = 1.9
MULTIPLE_TITLE = 0.28
MULTIPLE_X_LABELS = 0.5

# More lines than this on one latency panel and their min..p95 bands hide each other: the panel
# keeps the lines, and a row of small multiples, one per variant, shows each variant's bands.
MAX_BANDS = 2


def size_chart(name: str, group: pd.DataFrame) -> Chart:
    measured = ok_rows(group)
    op, phase = measured["op"].iloc[0], measured["phase"].iloc[0]
    palette = op_palette(measured)
    series = sorted(chart_series(measured), key=palette.order)
    one_size = measured["size_bytes"].nunique() == 1
    multiples = not one_size and len(series) > MAX_BANDS
    # A latency-only op (a barrier: S = 0) has no bandwidth: one panel, and the caption says why.
    latency_only = is_latency_only(measured)
    variants = len(palette.variants)
    width = 6.5 if latency_only else 12
    below = 2.6 * math.ceil(variants / 4) if multiples else 0.0
    fig = Figure(figsize=(width, TOP + below))
    top, bottom = fig.subfigures(2, 1, height_ratios=(TOP, below)) if multiples else (fig, None)
    # The legend hangs to the right of the last panel (into the right margin, or past it);
    # rotated variant names under bars need more room than size labels.
    place = grid(
        width,
        TOP,
        top=title_margin(2),
        bottom=ROTATED_LABELS if one_size else X_LABELS,
        right=LEGEND,
        columns=1 if latency_only else 2,
        wspace=Y_LABELS,
    )
    latency, busbw = (top.subplots(gridspec_kw=place), None) if latency_only else top.subplots(1, 2, gridspec_kw=place)
    if one_size:
        _draw_bars(latency, busbw, series, palette)
    else:
        _draw_lines(latency, busbw, series, palette, bands=not multiples)
    if bottom is not None:
        _draw_multiples(bottom, series, palette)
    latency.set_title(
        "latency: mean bars, 95% interval (black), min..p95 (gray)"
        if one_size
        else "latency" + (" (min..p95 bands below, per variant)" if multiples else "")
    )
    if busbw is not None:
        busbw.set_ylabel("busbw (GB/s, from mean time)")
        busbw.set_ylim(bottom=0)
        busbw.set_title("bus bandwidth")
    what = (
        f"at its one workload size S = {format_size(int(measured['size_bytes'].iloc[0]))}"
        if one_size
        else "against size"
    )
    if latency_only:
        what += " (latency only: S = 0, no bandwidth)"
    facts, left_out = title_facts(measured), left_out_note(group)
    suptitle(fig, f"{op} · {phase}\n{facts}", TOP + below, place)
    if left_out:
        fig.text(0.5, -0.03, left_out, ha="center", fontsize=8, color="dimgray")
    shown = "latency" if latency_only else "latency and busbw"
    caption = f"{op} ({phase}): {shown} {what}; {facts}." + (f" {left_out}" if left_out else "")
    return Chart(name=name, kind="size", figure=fig, caption=caption)


def _draw_lines(latency, busbw, series: list[tuple[str, pd.DataFrame]], palette: Palette, bands: bool = True) -> None:
    """A line per series against size: the mean, the headline (with its min..p95 band when few lines share the
    panel) for latency, busbw beside it; one legend, outside the data."""
    for label, rows in series:
        style = palette.style(rows)
        latency.plot(rows["size_bytes"], rows[HEADLINE], markersize=4, label=label, **style)
        if bands:
            draw_band(latency, rows, color=style["color"])
            draw_interval(latency, rows, color=style["color"])
        if busbw is not None:
            busbw.plot(rows["size_bytes"], rows["busbw_gbps"], markersize=4, label=label, **style)
    sizes = pd.concat([rows["size_bytes"] for _, rows in series])
    for ax in (latency, busbw):
        if ax is not None:
            size_axis(ax, sizes)
    latency_axis(latency)
    latency.set_ylabel("time per op (µs): mean line" + (" with its 95% interval, min..p95 band" if bands else ""))
    legend_outside(busbw or latency)


def _draw_multiples(subfig, series: list[tuple[str, pd.DataFrame]], palette: Palette) -> None:
    """Small multiples: one latency panel per variant, its runs' mean lines with their min..p95
    bands, on shared axes so panels compare at a glance."""
    variants = palette.variants
    columns, rows = min(4, len(variants)), math.ceil(len(variants) / min(4, len(variants)))
    width, height = subfig.get_figure(root=True).get_size_inches()
    place = grid(
        width,
        height - TOP,
        top=MULTIPLE_TITLE,
        bottom=MULTIPLE_X_LABELS,
        columns=columns,
        rows=rows,
        wspace=0.15,
        hspace=MULTIPLE_TITLE + 0.2,
    )
    axes = subfig.subplots(rows, columns, sharex=True, sharey=True, squeeze=False, gridspec_kw=place)
    sizes = pd.concat([rows["size_bytes"] for _, rows in series])
    for ax, variant in zip(axes.flat, variants):
        for _, rows in series:
            if rows["variant"].iloc[0] == variant:
                style = palette.style(rows)
                ax.plot(rows["size_bytes"], rows[HEADLINE], markersize=3, label=f"_{variant}", **style)
                draw_band(ax, rows, color=style["color"])
                draw_interval(ax, rows, color=style["color"])
        ax.set_title(variant, fontsize=9, color=palette.color(variant))
        size_axis(ax, sizes)
        ax.set_xlabel("")
        ax.tick_params(labelsize=7)
    latency_axis(axes.flat[0])
    for ax in list(axes.flat)[len(variants) :]:
        ax.set_visible(False)
    shared_labels(axes, "time per op (µs): mean, 95% interval, min..p95", "size S in bytes", fontsize=8)


def _draw_bars(latency, busbw, series: list[tuple[str, pd.DataFrame]], palette: Palette) -> None:
    """A bar per series when every row has one size (a fixed workload): a line would be a dot.
    Variants sort by their numeric meaning (bucketed_1MB before bucketed_25MB); each bar shows its value."""
    means = [float(rows[HEADLINE].iloc[0]) for _, rows in series]
    # min..p95 around the mean; a mean above the p95 (one huge iteration) gets no upper whisker.
    spread = [
        [max(0.0, m - float(rows["time_us_min"].iloc[0])) for m, (_, rows) in zip(means, series)],
        [max(0.0, float(rows["time_us_p95"].iloc[0]) - m) for m, (_, rows) in zip(means, series)],
    ]
    bars = bar_group(
        latency, series, palette, means, [f"{m:,.0f}" for m in means], yerr=spread, capsize=3, ecolor="dimgray"
    )
    centres = [bar.get_x() + bar.get_width() / 2 for bar in bars]
    firsts = pd.concat([rows.iloc[:1] for _, rows in series])
    latency.errorbar(centres, means, yerr=interval_errors(firsts), fmt="none", ecolor="black", capsize=5, elinewidth=2)
    latency.set_ylabel("time per op (µs)")
    latency.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:,.0f}"))
    if busbw is None:  # latency only (a barrier): its panel keeps the legend
        return
    busbw_values = [float(rows["busbw_gbps"].iloc[0]) for _, rows in series]
    bar_group(busbw, series, palette, busbw_values, [f"{b:.3g}" for b in busbw_values])
    if latency.get_legend() is not None:  # one legend per figure, beside the last panel
        latency.get_legend().remove()
