"""Axes and drawing helpers that every chart kind shares: the log-2 size axis with human labels,
the log latency axis, the log-2 ratio axis, bands, interval bars, grouped bars, the legend."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

from commbench.analysis.charts.style import DENSE_POINTS, HATCHES, Family, Palette
from commbench.results.stats import HEADLINE, HEADLINE_HI, HEADLINE_LO
from commbench.units import round_size

_MAX_TICKS = 9


def size_axis(ax, sizes: Iterable[float], family: Family | None = None) -> None:
    """Log-2 size axis with human labels (8B, 1K, 1M): at the measured sizes when they are few,
    else at powers of two thinned to stay legible."""
    family = family or Family("")
    snap = round_size if family.workload == "size_bytes" else int  # 4K+8B is drawn at its 4K tick
    sizes = sorted({float(snap(int(s))) for s in set(sizes) if s > 0})  # each distinct size snapped once
    ax.set_xscale("log", base=2)
    if len(sizes) <= _MAX_TICKS:
        ticks: list[float] = []
        for size in sizes:  # measured sizes closer than ~an octave would print over each other
            if not ticks or size >= ticks[-1] * 1.8:
                ticks.append(size)
    else:
        lo, hi = int(sizes[0]).bit_length() - 1, int(sizes[-1] - 1).bit_length()
        exponents = list(range(lo, hi + 1))
        ticks = [2.0**e for e in exponents[:: -(-len(exponents) // _MAX_TICKS)]]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: family.format(round(x))))
    ax.set_xlabel(family.axis_label)
    ax.grid(True, which="major", alpha=0.3)


def draw_band(
    ax, rows: pd.DataFrame, low: str = "time_us_min", high: str = "time_us_p95", color: str = "C0", alpha: float = 0.18
) -> None:
    """One series' band between two columns against size (by default the min..p95 spread).

    min..p95: the fastest iteration bounds the low side; p95 rather than max on the high side,
    because one descheduled iteration on a shared machine would swamp the chart.
    """
    ax.fill_between(rows["size_bytes"], rows[low], rows[high], color=color, alpha=alpha, linewidth=0)


def draw_interval(ax, rows: pd.DataFrame, color: str = "C0") -> None:
    """One series' headline interval (time_us_mean_lo..hi) as an error bar at each size."""
    draw_errors(ax, rows["size_bytes"], rows[HEADLINE], interval_errors(rows), color)


def draw_errors(ax, x, y, errors: list, color: str) -> None:
    """Error bars at each x (errors: the distances down and up), or, for a dense series, the band
    between their ends."""
    if len(x) > DENSE_POINTS:
        ax.fill_between(x, y - errors[0], y + errors[1], color=color, alpha=0.35, linewidth=0)
    else:
        ax.errorbar(x, y, yerr=errors, fmt="none", ecolor=color, capsize=3)


def latency_axis(ax) -> None:
    """Log latency axis with plain numbers (200, 1000, 5000 read faster than 2x10^2)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:,.0f}" if y >= 1 else f"{y:g}"))
    # No minor ticks: the 1-2-5 majors already mark each decade thrice, and the unlabelled minors
    # were a third of the CPU time of drawing a sweep's charts (their ticks laid out on every draw).
    ax.yaxis.set_minor_locator(NullLocator())


def legend_outside(ax, **kwargs) -> None:
    """The axes' legend to the right of them, never over the data."""
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)


def _bar_positions(series: list[tuple[str, pd.DataFrame]], palette: Palette) -> tuple[list[float], list[str]]:
    """Grouped bars: (x of each series' bar, the variants at x = 0, 1, ...). A group per variant
    drawn, in the palette's order; within it a bar per run, side by side."""
    drawn = {str(rows["variant"].iloc[0]) for _, rows in series}
    variants = [v for v in palette.variants if v in drawn]
    runs = len(palette.runs)
    xs = [
        variants.index(str(rows["variant"].iloc[0])) + (palette.run_index(rows) - (runs - 1) / 2) * 0.8 / runs
        for _, rows in series
    ]
    return xs, variants


def bar_group(
    ax, series: list[tuple[str, pd.DataFrame]], palette: Palette, heights: list[float], labels: list[str], **kwargs
):
    """A bar per series (colour: its variant; hatch: its run), each labelled with its value."""
    xs, variants = _bar_positions(series, palette)
    bars = ax.bar(
        xs,
        heights,
        width=0.8 / len(palette.runs),
        color=[palette.color(str(rows["variant"].iloc[0])) for _, rows in series],
        hatch=[HATCHES[palette.run_index(rows) % len(HATCHES)] for _, rows in series],
        edgecolor="white",
        label=[label for label, _ in series],
        **kwargs,
    )
    ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
    ax.set_xticks(range(len(variants)), variants)
    ax.tick_params(axis="x", labelrotation=20)
    ax.grid(True, axis="y", alpha=0.3)
    if len(palette.runs) > 1:  # the variants are named on the axis; the legend says which hatch is which run
        runs = {palette.run_index(rows): label.removeprefix(str(rows["variant"].iloc[0])) for label, rows in series}
        handles = [
            Patch(
                facecolor="lightgray", edgecolor="dimgray", hatch=HATCHES[i % len(HATCHES)], label=runs[i].strip(" ()")
            )
            for i in sorted(runs)
        ]
        legend_outside(ax, handles=handles, title="run")
    return bars


def interval_errors(rows: pd.DataFrame) -> list:
    """Distances from the headline down to its interval's low end and up to its high end (0 where a
    file has no interval)."""
    value = rows[HEADLINE].to_numpy(dtype=float)
    lo = rows[HEADLINE_LO].fillna(rows[HEADLINE]).to_numpy(dtype=float)
    hi = rows[HEADLINE_HI].fillna(rows[HEADLINE]).to_numpy(dtype=float)
    return [value - lo, hi - value]


def ratio_axis(ax, values: list[float], extra: list[float] = ()) -> None:
    """Log-2 axis for ratios, with ticks on both sides of 1x whatever the data: 2x faster and 2x
    slower sit at equal distances from the baseline's line, and the reader sees which side is which.
    `extra`: further values (interval ends) the axis makes room for."""
    positive = [v for v in (*values, *extra) if v > 0] or [1.0]
    spread = max(max(positive), 1 / min(positive))
    steps = (1.25, 1.5, 2.0) if spread <= 2.3 else tuple(2.0**k for k in range(1, 31))
    low, high = min(*positive, 1 / steps[0]) / 1.15, max(*positive, steps[0]) * 1.15
    ax.set_yscale("log", base=2)
    ax.set_ylim(low, high)
    ticks = sorted({1.0, *(t for step in steps for t in (step, 1 / step) if low <= t <= high)})
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:.2f}".rstrip("0").rstrip(".") + "x"))
