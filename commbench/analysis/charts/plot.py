"""What `commbench plot` runs: a frame's panels (one per op and phase), each panel's charts, and
the process pool that draws them into files."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TypeVar

import pandas as pd

from commbench.analysis.charts.grouping import chart_panels
from commbench.analysis.charts.overlap import overlap_chart
from commbench.analysis.charts.render import (
    FORMATS,
    Chart,
    charts_folder,
    ensure_folder,
    refuse_existing,
    write_charts,
)
from commbench.analysis.charts.size import size_chart
from commbench.analysis.charts.speedup import speedup_chart
from commbench.analysis.charts.style import speedup_family
from commbench.errors import UserError
from commbench.results.reader import ok_rows, read_results

T = TypeVar("T")
U = TypeVar("U")


def plot_results(csv_paths: list[Path], out_dir: Path, fmt: str = "png", overwrite: bool = False) -> list[Path]:
    """Read result CSVs, write one file per chart into out_dir, and return the paths written. An
    existing chart is replaced only with overwrite: the check runs before anything is drawn."""
    if fmt not in FORMATS:
        raise UserError(f"unknown chart format {fmt!r}; choose one of {', '.join(FORMATS)}")
    frame = read_results(csv_paths)
    if ok_rows(frame).empty:
        raise UserError(f"nothing to plot in {', '.join(map(str, csv_paths))}: no row has status ok")
    ensure_folder(Path(out_dir))
    panels = list(chart_panels(frame))
    # Every name a panel's charts can take (its size, overlap and speedup charts).
    names = [f"{name}{kind}.{fmt}" for name, _ in panels for kind in ("", "-overlap", "-speedup")]
    refuse_existing([Path(out_dir) / n for n in names], overwrite, tuple(csv_paths))
    done = in_pool(lambda i: _write_panel(panels[i], out_dir, fmt, True), len(panels), lambda i: len(panels[i][1]))
    return [path for paths in done for path in paths]


def in_pool(work: Callable[[int], T], count: int, cost: Callable[[int], int]) -> list[T]:
    """[work(i) for i in range(count)], drawn in a pool of forked processes when there are two cores
    and two items or more. work need not pickle: the workers are forked after it is set, so they
    inherit it (and every figure it reads) and only the indices and results cross processes."""
    return in_pool_while(work, count, cost, lambda: None)[0]


def in_pool_while(
    work: Callable[[int], T], count: int, cost: Callable[[int], int], meanwhile: Callable[[], U]
) -> tuple[list[T], U]:
    """in_pool's results and meanwhile(), which this process runs while the workers draw (the
    report's tables): its work is done beside theirs, not after it. meanwhile starts once the
    workers are forked, so nothing it makes reaches them; without a pool it runs after the work."""
    global _WORK
    workers = min(count, os.cpu_count() or 1, MAX_CHART_WORKERS)
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [work(i) for i in range(count)], meanwhile()
    # Drawing is CPU-bound Python (about half a second a chart): one process per core, an item at a
    # time. Forked, so the workers start with matplotlib and pandas already imported. The costliest
    # items go first, so that no large one is left to one worker while the others idle; the results
    # come back in the items' order, as the serial loop gives them.
    order = sorted(range(count), key=lambda i: -cost(i))
    _WORK = work
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            results = pool.map(_run_work, order)  # every item submitted: the workers are forked now
            extra = meanwhile()
            done = dict(zip(order, results))
    finally:
        _WORK = None
    return [done[i] for i in range(count)], extra


_WORK: Callable[[int], object] | None = None  # in_pool's work, inherited by its forked workers


def _run_work(i: int) -> object:
    assert _WORK is not None, "in_pool's worker started without its work"
    return _WORK(i)


# Chart processes at most, however many cores: beyond a few the workers' start-up outweighs the gain.
MAX_CHART_WORKERS = 8


def _write_panel(panel: tuple[str, pd.DataFrame], out_dir: Path, fmt: str, overwrite: bool) -> list[Path]:
    return write_charts(panel_charts(*panel), out_dir, fmt, overwrite)


def build_charts(frame: pd.DataFrame, sizes: Callable[[str, pd.DataFrame], Chart] | None = None) -> list[Chart]:
    """Every chart for a frame from read_results: per (op, phase) the size chart (drawn by `sizes`,
    default size_chart), then its speedups."""
    return [chart for name, group in chart_panels(frame) for chart in panel_charts(name, group, sizes)]


def panel_charts(
    name: str, group: pd.DataFrame, sizes: Callable[[str, pd.DataFrame], Chart] | None = None
) -> list[Chart]:
    """One panel's charts: the size chart, the overlap chart when measured, the speedups."""
    charts: list[Chart] = []
    if not ok_rows(group).empty:
        charts.append((sizes or size_chart)(name, group))
    if "overlap" in group.columns and ok_rows(group)["overlap"].notna().any():
        charts.append(overlap_chart(name, group))
    family = speedup_family(group["op"].iloc[0])
    if family and (speedup := speedup_chart(name, group, family)):
        charts.append(speedup)
    return charts


def plot_beside(csv_path: Path, fmt: str = "png", overwrite: bool = False) -> list[Path]:
    """Charts of a finished run into charts_folder(csv_path), as `sweep` and `syncbn` do by default;
    overwrite (the run's --overwrite) replaces the charts of the run it replaced."""
    return plot_results([Path(csv_path)], charts_folder(Path(csv_path)), fmt, overwrite)
