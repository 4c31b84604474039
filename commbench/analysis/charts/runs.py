"""The chart of one op across several runs: a panel per variant (small multiples on shared axes),
the runs as its lines, each run in one colour on every chart of the report, so "which run is
slower, and where" reads at a glance instead of from 18 overlapping lines."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from commbench.analysis.charts.axes import draw_interval, latency_axis, size_axis
from commbench.analysis.charts.grouping import title_facts
from commbench.analysis.charts.layout import X_LABELS, grid, shared_labels, suptitle, title_margin
from commbench.analysis.charts.render import Chart
from commbench.analysis.charts.style import markevery, op_palette
from commbench.results.reader import ok_rows
from commbench.results.stats import HEADLINE

COLUMNS = 3  # panels per row
# Inches (charts/layout.py): a panel's title at 10 points, and the legend's room right of the grid.
PANEL_TITLE = 0.3
LEGEND = 2.4


def runs_chart(name: str, group: pd.DataFrame, colours: dict[str, str], incomplete: set[str]) -> Chart:
    """The mean (the headline) against size (with its 95% interval), a panel per variant, a line per run; an
    incomplete run's line is dashed. colours: run -> colour (analysis/runs.py run_colours)."""
    measured = ok_rows(group)
    op, phase = measured["op"].iloc[0], measured["phase"].iloc[0]
    palette = op_palette(measured)
    variants = list(palette.variants)  # the baseline first, then by name and number
    columns = min(COLUMNS, len(variants))
    rows_of_panels = math.ceil(len(variants) / columns)
    width, height = 3.9 * columns + 2.4, 3.0 * rows_of_panels + 1.0
    fig = Figure(figsize=(width, height))
    place = grid(
        width,
        height,
        top=title_margin(2, panel_titles=PANEL_TITLE),
        bottom=X_LABELS,
        right=LEGEND,
        columns=columns,
        rows=rows_of_panels,
        wspace=0.15,  # shared y axes: only the first column has tick labels
        hspace=PANEL_TITLE + 0.1,
    )
    axes = fig.subplots(rows_of_panels, columns, sharex=True, sharey=True, squeeze=False, gridspec_kw=place)
    runs = [r for r in colours if r in set(measured["run"])]
    lines = dict(iter(measured.groupby(["variant", "run"], sort=False)))  # once, not a filter per panel and run
    for ax, variant in zip(axes.flat, variants):
        for run in runs:
            rows = lines.get((variant, run), measured.iloc[:0]).sort_values("size_bytes")
            if rows.empty:
                continue
            for _, line in rows.groupby(["backend", "world_size"], sort=True):  # one run, one line each
                style = "--" if run in incomplete else "-"
                ax.plot(
                    line["size_bytes"],
                    line[HEADLINE],
                    style,
                    marker="o",
                    markersize=3,
                    markevery=markevery(len(line)),
                    color=colours[run],
                )
                draw_interval(ax, line, color=colours[run])
        ax.set_title(variant, fontsize=10)
        size_axis(ax, measured["size_bytes"])
        ax.set_xlabel("")
        ax.tick_params(labelsize=7)
        ax.grid(True, which="major", alpha=0.25)
    latency_axis(axes.flat[0])
    for ax in list(axes.flat)[len(variants) :]:
        ax.set_visible(False)
    handles = [
        Line2D(
            [],
            [],
            color=colours[r],
            marker="o",
            linestyle="--" if r in incomplete else "-",
            label=_label(r, incomplete),
        )
        for r in runs
    ]
    # The legend just right of the grid's top right corner (figure coordinates).
    corner = axes[0][-1].get_position()
    fig.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(corner.x1 + 0.15 / width, corner.y1),
        borderaxespad=0.0,
        fontsize=8,
        title="run",
        title_fontsize=8,
    )
    shared_labels(
        axes, "time per op (µs): mean with its 95% interval", "size S in bytes (S per op: see commbench list)"
    )
    facts = title_facts(measured)
    suptitle(fig, f"{op} · {phase}: {len(runs)} runs, a panel per variant\n{facts}", height, place)
    caption = (
        f"{op} ({phase}): mean against size in {len(runs)} runs, one panel per variant ({', '.join(variants)}), "
        "each run one colour on every chart" + ("; dashed: an incomplete run" if incomplete & set(runs) else "") + "."
    )
    return Chart(name=name, kind="size", figure=fig, caption=caption)


def _label(run: str, incomplete: set[str]) -> str:
    return f"{run} (incomplete)" if run in incomplete else run
