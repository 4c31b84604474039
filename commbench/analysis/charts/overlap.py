"""The overlap chart (--overlap): how much of the shorter of communication and computation hides
behind the longer, per size."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from commbench.analysis.charts.axes import legend_outside, size_axis
from commbench.analysis.charts.grouping import chart_series, title_facts
from commbench.analysis.charts.layout import grid, suptitle, title_margin
from commbench.analysis.charts.render import Chart
from commbench.analysis.charts.style import op_palette
from commbench.results.reader import ok_rows


def overlap_chart(name: str, group: pd.DataFrame) -> Chart:
    """--overlap: the share of the shorter of (collective, matmul) hidden behind the longer, per size."""
    measured = ok_rows(group)
    measured = measured[measured["overlap"].notna()]
    op, phase = measured["op"].iloc[0], measured["phase"].iloc[0]
    palette = op_palette(measured)
    fig = Figure(figsize=(8, 4.8))
    place = grid(8, 4.8, top=title_margin(2, panel_titles=0.12), right=1.9)  # the legend to the right
    ax = fig.subplots(gridspec_kw=place)
    for label, rows in sorted(chart_series(measured), key=palette.order):
        ax.plot(rows["size_bytes"], rows["overlap"], markersize=4, label=label, **palette.style(rows))
    size_axis(ax, measured["size_bytes"])
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("overlap: hidden share of the shorter of comm and compute")
    ax.axhline(1.0, color="gray", linestyle=":", linewidth=1)
    legend_outside(ax)
    facts = title_facts(measured)
    suptitle(fig, f"{op} · {phase}: communication/computation overlap (1 = fully hidden)\n{facts}", 4.8, place)
    caption = (
        f"{op} ({phase}): overlap = (comm + compute - overlapped) / min(comm, compute), clipped to [0, 1], "
        f"per size and variant, the matmul sized by --compute; {facts}."
    )
    return Chart(name=f"{name}-overlap", kind="overlap", figure=fig, caption=caption)
