"""Charts laid out from their known geometry (charts/layout.py), not by constrained layout: drawn,
no title, label, legend or note overlaps another panel's texts or data, and none is cut off."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.transforms import Bbox

from commbench.analysis.charts.layout import grid
from commbench.analysis.charts.plot import build_charts
from commbench.analysis.charts.render import Chart, render
from commbench.analysis.charts.runs import runs_chart
from commbench.analysis.model import fit_frame, model_charts
from commbench.analysis.runs import run_colours
from commbench.results.reader import read_results
from tests.support.synth_results import CHART_CASES, Case, synth_run

# A long name and many of them: the legend and the panel titles take room.
MANY = [
    Case("grouped_all_gather", "separate", factor=2.0),
    Case("grouped_all_gather", "coalesced"),
    Case("grouped_all_gather", "concat", factor=1.2),
    Case("grouped_all_gather", "grouped", factor=1.5),
]


def _boxes(chart: Chart) -> list[tuple[str, object, Bbox]]:
    """(what, whose, its box in pixels) of every visible text block of a drawn chart: the figure's
    title, notes and legends (whose: the figure), and per panel its title, x and y label, legend and
    each axis' tick labels (whose: the panel)."""
    fig = chart.figure
    renderer = fig.canvas.get_renderer()
    found = []
    texts = [("suptitle", fig._suptitle), *(("note", t) for t in fig.texts)]
    texts += [("figure legend", legend) for legend in fig.legends]
    for subfig in fig.subfigs:
        texts += [("subfigure note", t) for t in subfig.texts] + [("subfigure legend", lg) for lg in subfig.legends]
    found += [(what, fig, t.get_window_extent(renderer)) for what, t in texts if t is not None and t.get_visible()]
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        parts = [("title", ax.title), ("x label", ax.xaxis.label), ("y label", ax.yaxis.label)]
        if ax.get_legend() is not None:
            parts.append(("legend", ax.get_legend()))
        found += [(what, ax, t.get_window_extent(renderer)) for what, t in parts if t.get_visible() and _text(t)]
        for name, axis in (("x ticks", ax.xaxis), ("y ticks", ax.yaxis)):
            labels = [t.get_window_extent(renderer) for t in _drawn_tick_labels(axis)]
            if labels:
                found.append((name, ax, Bbox.union(labels)))
    return found


def _drawn_tick_labels(axis) -> list:
    """The tick labels the axis draws: its major ticks within its view, labelled."""
    low, high = sorted(axis.get_view_interval())
    locs = axis.get_majorticklocs()
    ticks = axis.get_major_ticks(len(locs))
    return [
        tick.label1
        for tick, loc in zip(ticks, locs)
        if low <= loc <= high and tick.label1.get_visible() and tick.label1.get_text()
    ]


def _text(artist) -> bool:
    return not hasattr(artist, "get_text") or bool(artist.get_text())


def _overlap(a: Bbox, b: Bbox, slack: float = 1.0) -> bool:
    return a.x0 < b.x1 - slack and b.x0 < a.x1 - slack and a.y0 < b.y1 - slack and b.y0 < a.y1 - slack


def assert_laid_out(chart: Chart) -> None:
    render(chart, "png")  # drawn as a file is: tick labels placed, labels past them
    fig = chart.figure
    boxes = _boxes(chart)
    panels = [(ax, ax.get_window_extent()) for ax in fig.axes if ax.get_visible()]
    for i, (what, whose, box) in enumerate(boxes):
        # Nothing another panel or the figure wrote sits on a panel's data...
        for ax, area in panels:
            assert whose is ax or not _overlap(box, area), (
                f"{chart.name}: the {what} overlaps the panel {ax.get_title()!r}"
            )
        # ... nor on another's texts: a panel's own (its title and tick labels) may touch.
        for other, theirs, their_box in boxes[i + 1 :]:
            if whose is not theirs:
                assert not _overlap(box, their_box), f"{chart.name}: the {what} overlaps the {other}"
    # The title is inside the top of the figure and above every panel's own title.
    title = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
    assert title.y1 <= fig.bbox.y1 + 0.5
    assert all(title.y0 >= box.y1 - 1 for what, _, box in boxes if what == "title")


def test_the_size_speedup_and_bar_charts_are_laid_out_without_overlap(tmp_path: Path) -> None:
    runs = [
        synth_run(tmp_path / "a.csv", MANY, seed=1, raw=False),
        synth_run(tmp_path / "b.csv", MANY, seed=2, raw=False, world_size=4),  # 8 lines: small multiples
        synth_run(tmp_path / "one.csv", CHART_CASES, seed=3, raw=False),
    ]
    charts = build_charts(read_results(runs[:2]))
    assert [c.kind for c in charts] == ["size", "speedup"] and len(charts[0].figure.axes) == 6
    one_size = [Case("grouped_all_gather", c.variant, factor=c.factor, sizes=(1 << 20,)) for c in MANY]
    bars = build_charts(read_results([synth_run(tmp_path / "bars.csv", one_size, seed=4, raw=False)]))
    for chart in [*charts, *bars, *build_charts(read_results(runs[2:]))]:
        assert_laid_out(chart)


def test_the_runs_and_model_charts_are_laid_out_without_overlap(tmp_path: Path) -> None:
    paths = [synth_run(tmp_path / f"{day}.csv", MANY, seed=i, raw=False) for i, day in enumerate(("mon", "tue"))]
    frame = read_results(paths)
    chart = runs_chart("grouped_all_gather-comm", frame, run_colours(frame), set())
    assert sum(ax.get_visible() for ax in chart.figure.axes) == 4  # a second row of panels
    assert_laid_out(chart)
    fits, _ = fit_frame(frame)
    for chart in model_charts(frame, fits):
        assert_laid_out(chart)


def test_a_grid_with_no_room_for_its_panels_says_so() -> None:
    assert grid(10, 5, top=1, bottom=1, left=1, right=1, columns=2, wspace=2) == pytest.approx(
        {"left": 0.1, "right": 0.9, "top": 0.8, "bottom": 0.2, "wspace": 2 / 3, "hspace": 0.0}
    )
    with pytest.raises(ValueError, match="no room"):
        grid(3, 3, top=2, bottom=2)
