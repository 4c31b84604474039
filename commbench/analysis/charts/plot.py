"""What `commbench plot` runs: a frame's panels (one per op and phase), each panel's charts, and
the process pool that draws them into files."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

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
    workers = min(len(panels), os.cpu_count() or 1, MAX_CHART_WORKERS)
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [path for panel in panels for path in _write_panel(panel, out_dir, fmt, True)]
    # Drawing is CPU-bound Python (about half a second a chart): one process per core, a panel at a
    # time. Forked, so the workers start with matplotlib and pandas already imported. The panels with
    # the most rows go first, so that no large panel is left to one worker while the others idle;
    # the paths come back in the panels' order, as the serial loop gives them.
    order = sorted(range(len(panels)), key=lambda i: -len(panels[i][1]))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        done = dict(zip(order, pool.map(_write_panel, *_columns([panels[i] for i in order], out_dir, fmt))))
        return [path for i in range(len(panels)) for path in done[i]]


def _columns(panels: list[tuple[str, pd.DataFrame]], out_dir: Path, fmt: str) -> tuple[list, ...]:
    """pool.map's arguments for _write_panel, one list per parameter."""
    return panels, [out_dir] * len(panels), [fmt] * len(panels), [True] * len(panels)


# Chart processes at most, however many cores: beyond a few the workers' start-up outweighs the gain.
MAX_CHART_WORKERS = 8


def _write_panel(panel: tuple[str, pd.DataFrame], out_dir: Path, fmt: str, overwrite: bool) -> list[Path]:
    return write_charts(_panel_charts(*panel), out_dir, fmt, overwrite)


def build_charts(frame: pd.DataFrame, sizes: Callable[[str, pd.DataFrame], Chart] | None = None) -> list[Chart]:
    """Every chart for a frame from read_results: per (op, phase) the size chart (drawn by `sizes`,
    default size_chart), then its speedups."""
    return [chart for name, group in chart_panels(frame) for chart in _panel_charts(name, group, sizes)]


def _panel_charts(
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
