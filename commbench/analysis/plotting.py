"""Charts of result CSVs: latency and busbw against size, and speedups within variant families.

Figures are built as matplotlib `Figure` objects drawn by the Agg canvas, never through pyplot:
no global figure state, no display needed, and tests can inspect what `build_charts` returns.
"""

from __future__ import annotations

import io
import itertools
import math
import multiprocessing
import os
import re
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

from commbench.analysis.speedup import WITHIN_NOISE, overall, paired_speedups, variant_verdicts
from commbench.errors import UserError
from commbench.results.paths import make_folder
from commbench.results.reader import ok_rows, read_results
from commbench.units import format_size, round_size

FORMATS = ("png", "svg")


SIZE_AXIS_LABEL = "size S in bytes (S per op: see commbench list)"


@dataclass(frozen=True)
class Family:
    """A variant family: the variant the others are measured against, and which column says that
    two rows did the same work. Usually S; for sync_bn the channel count C (the `count` column),
    because each strategy moves a different number of bytes for the same layer. Ops declare both
    in their spec (OpSpec.baseline, workload_column)."""

    baseline: str
    workload: str = "size_bytes"
    workload_name: str = "S"

    @property
    def axis_label(self) -> str:
        return (
            SIZE_AXIS_LABEL if self.workload == "size_bytes" else f"{self.workload_name} (the {self.workload} column)"
        )

    @property
    def symbol(self) -> str:
        """The workload's one-letter name in verdicts (S, or C for sync_bn's "channels C")."""
        return self.workload_name.split()[-1]

    def format(self, value: float) -> str:
        return format_size(int(value)) if self.workload == "size_bytes" else str(int(value))


def op_palette(rows: pd.DataFrame) -> Palette:
    """The palette of one op's charts (rows of one op): colours follow the op's declared variants,
    its baseline first, so a variant looks the same on every chart of the op."""
    from commbench.ops import spec_of

    op = str(rows["op"].iloc[0])
    family, spec = speedup_family(op), spec_of(op)
    baseline = family.baseline if family else None
    palette = Palette.of(rows, baseline)
    declared = [*(spec.variants if spec else ()), *sorted(set(palette.variants))]
    order = sorted(dict.fromkeys(declared), key=lambda v: variant_order(v, baseline))
    return Palette(palette.variants, palette.runs, tuple(order))


def speedup_family(op: str) -> Family | None:
    """The op's variant family, as its spec declares it; None for ops without a baseline."""
    from commbench.ops import spec_of

    spec = spec_of(op)
    if spec is None or spec.baseline is None:
        return None
    return Family(spec.baseline, spec.workload_column, spec.workload_name)


# What distinguishes two lines on one chart; the label shows only the parts that differ.
SERIES_COLUMNS = ("backend", "variant", "run", "world_size")
RUN_COLUMNS = ("backend", "run", "world_size")  # one run: a CSV's rows at one world size on one backend
_MAX_TICKS = 9
# Colour encodes the variant (matplotlib's tab10, whose colours differ in lightness as well as hue);
# line style and marker encode the run, so no two lines of a chart look alike.
COLORS = tuple(f"C{i}" for i in range(10))
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")
HATCHES = ("", "//", "..", "xx", "\\\\", "++")
# More lines than this on one latency panel and their min..p95 bands hide each other: the panel
# keeps the lines, and a row of small multiples, one per variant, shows each variant's bands.
MAX_BANDS = 2
_QUANTITY = re.compile(r"(\d+(?:\.\d+)?(?:e\d+)?)([KMGT]?)i?B?$", re.IGNORECASE)


def variant_order(variant: str, baseline: str | None = None) -> tuple[int, str, float, str]:
    """Sort key of variants: the baseline first, then by name, and variants that differ only in a
    number (bucketed_1MB, bucketed_5MB, bucketed_25MB; bucketed_256K, bucketed_1M, bucketed_1e7)
    by that number's value, not its text. Other variants follow those of their family (flat)."""
    if variant == baseline:
        return (0, "", 0.0, "")
    m = _QUANTITY.search(variant)
    if m is None:
        return (1, variant, math.inf, "")
    prefix = variant[: m.start()]
    scale = 1024.0 ** ("KMGT".index(m.group(2).upper()) + 1) if m.group(2) else 1.0
    return (1, prefix, float(m.group(1)) * scale, variant)


@dataclass(frozen=True)
class Palette:
    """How the lines of an op's charts look: a colour per variant, a line style and a marker per run.

    The colour of a variant is its place among every variant the op declares (then any other
    measured), so it is the same on the op's size, speedup, overlap and model charts, whatever
    subset a chart shows. `variants` holds the measured ones, in drawing order.
    """

    variants: tuple[str, ...]
    runs: tuple[tuple[str, str, int], ...]
    color_order: tuple[str, ...] = ()

    @classmethod
    def of(cls, rows: pd.DataFrame, baseline: str | None = None) -> Palette:
        variants = sorted(set(rows["variant"]), key=lambda v: variant_order(v, baseline))
        runs = sorted({(str(b), str(r), int(w)) for b, r, w in rows[list(RUN_COLUMNS)].itertuples(index=False)})
        return cls(tuple(variants), tuple(runs), tuple(variants))

    def run_index(self, rows: pd.DataFrame) -> int:
        first = rows.iloc[0]
        return self.runs.index((str(first["backend"]), str(first["run"]), int(first["world_size"])))

    def color(self, variant: str) -> str:
        order = self.color_order or self.variants
        return COLORS[order.index(variant) % len(COLORS)] if variant in order else "gray"

    def style(self, rows: pd.DataFrame) -> dict[str, str]:
        """Keyword arguments of Axes.plot for one series' rows."""
        run = self.run_index(rows)
        return {
            "color": self.color(str(rows["variant"].iloc[0])),
            "linestyle": LINESTYLES[run % len(LINESTYLES)],
            "marker": MARKERS[run % len(MARKERS)],
        }

    def order(self, series: tuple[str, pd.DataFrame]) -> tuple[int, int]:
        """Sort key of a series: by variant, then by run."""
        rows = series[1]
        return (self.variants.index(str(rows["variant"].iloc[0])), self.run_index(rows))


@dataclass
class Chart:
    """One figure, the file stem it is saved under, and a sentence saying what it shows."""

    name: str
    kind: str  # "size" (latency and busbw against size) or "speedup"
    figure: Figure
    caption: str
    notes: tuple[str, ...] = ()  # what the chart lets a reader conclude (a speedup chart's verdicts)


def charts_folder(csv_path: Path) -> Path:
    """Where `commbench sweep` puts a run's charts: <csv stem>-charts/ beside the CSV."""
    csv_path = Path(csv_path)
    return csv_path.with_name(csv_path.stem + "-charts")


def plot_results(csv_paths: list[Path], out_dir: Path, fmt: str = "png") -> list[Path]:
    """Read result CSVs, write one file per chart into out_dir, and return the paths written."""
    if fmt not in FORMATS:
        raise UserError(f"unknown chart format {fmt!r}; choose one of {', '.join(FORMATS)}")
    frame = read_results(csv_paths)
    if ok_rows(frame).empty:
        raise UserError(f"nothing to plot in {', '.join(map(str, csv_paths))}: no row has status ok")
    ensure_folder(Path(out_dir))
    panels = list(_panels(frame))
    workers = min(len(panels), os.cpu_count() or 1, MAX_CHART_WORKERS)
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [path for panel in panels for path in _write_panel(panel, out_dir, fmt)]
    # Drawing is CPU-bound Python (about half a second a chart): one process per core, a panel at a
    # time. Forked, so the workers start with matplotlib and pandas already imported.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        done = pool.map(_write_panel, panels, [out_dir] * len(panels), [fmt] * len(panels))
        return [path for paths in done for path in paths]


# Chart processes at most, however many cores: beyond a few the workers' start-up outweighs the gain.
MAX_CHART_WORKERS = 8


def _write_panel(panel: tuple[str, pd.DataFrame], out_dir: Path, fmt: str) -> list[Path]:
    return write_charts(_panel_charts(*panel), out_dir, fmt)


def write_charts(charts: list[Chart], out_dir: Path, fmt: str) -> list[Path]:
    """One file per chart in out_dir (created); returns the paths written."""
    out_dir = ensure_folder(Path(out_dir))
    written = []
    for chart in charts:
        path = out_dir / f"{chart.name}.{fmt}"
        try:
            path.write_bytes(render(chart, fmt))
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror}") from None
        written.append(path)
    return written


def ensure_folder(folder: Path) -> Path:
    """Create an output folder, or say in one line why it cannot be used."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"output folder {folder} is a file; give a folder name")
    make_folder(folder)
    if not os.access(folder, os.W_OK):
        raise UserError(f"cannot write into the output folder {folder}: permission denied")
    return folder


def render(chart: Chart, fmt: str) -> bytes:
    """The chart encoded as PNG or SVG bytes."""
    buf = io.BytesIO()
    FigureCanvasAgg(chart.figure)  # attaches the Agg canvas: no GUI backend is ever chosen
    # PNG at zlib level 1: encoding at the default level took about 15% of the drawing time,
    # for files under a tenth smaller.
    extra = {"pil_kwargs": {"compress_level": 1}} if fmt == "png" else {}
    chart.figure.savefig(buf, format=fmt, dpi=110, bbox_inches="tight", **extra)
    return buf.getvalue()


def build_charts(frame: pd.DataFrame) -> list[Chart]:
    """Every chart for a frame from read_results: per (op, phase) the size chart, then its speedups."""
    return [chart for name, group in _panels(frame) for chart in _panel_charts(name, group)]


def _panel_charts(name: str, group: pd.DataFrame) -> list[Chart]:
    """One panel's charts: the size chart, the overlap chart when measured, the speedups."""
    charts: list[Chart] = []
    if not ok_rows(group).empty:
        charts.append(_size_chart(name, group))
    if "overlap" in group.columns and ok_rows(group)["overlap"].notna().any():
        charts.append(_overlap_chart(name, group))
    family = speedup_family(group["op"].iloc[0])
    if family and (speedup := _speedup_chart(name, group, family)):
        charts.append(speedup)
    return charts


def _overlap_chart(name: str, group: pd.DataFrame) -> Chart:
    """--overlap: the share of the shorter of (collective, matmul) hidden behind the longer, per size."""
    measured = ok_rows(group)
    measured = measured[measured["overlap"].notna()]
    op, phase = measured["op"].iloc[0], measured["phase"].iloc[0]
    palette = op_palette(measured)
    fig = Figure(figsize=(8, 4.8), layout="constrained")
    ax = fig.subplots()
    for label, rows in sorted(_series(measured), key=palette.order):
        ax.plot(rows["size_bytes"], rows["overlap"], markersize=4, label=label, **palette.style(rows))
    _size_axis(ax, measured["size_bytes"])
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("overlap: hidden share of the shorter of comm and compute")
    ax.axhline(1.0, color="gray", linestyle=":", linewidth=1)
    _legend_outside(ax)
    facts = _facts(measured)
    fig.suptitle(f"{op} · {phase}: communication/computation overlap (1 = fully hidden)\n{facts}", fontsize=11)
    caption = (
        f"{op} ({phase}): overlap = (comm + compute - overlapped) / min(comm, compute), clipped to [0, 1], "
        f"per size and variant, the matmul sized by --compute; {facts}."
    )
    return Chart(name=f"{name}-overlap", kind="overlap", figure=fig, caption=caption)


def _panels(frame: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """Groups of rows that share a chart: one per (op, phase), split by dtype and mode when mixed."""
    measured = frame[frame["phase"] != ""]  # unavailable rows have no phase; they go in captions
    split = [c for c in ("dtype", "mode") if measured[c].nunique() > 1]
    for key, group in measured.groupby(["op", "phase", *split], sort=True):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(map(str, key)))
        unavailable = frame[(frame["op"] == key[0]) & (frame["status"] == "unavailable")]
        yield name, pd.concat([group, unavailable])


def _facts(group: pd.DataFrame) -> str:
    """World size, backend, dtype, mode and hosts of the rows on a chart, for its title. A latency-only
    op (a barrier) moves no data: no dtype is named for it."""

    def values(column: str) -> str:
        return ", ".join(sorted({str(v) for v in group[column].dropna() if str(v)}))

    hosts = sorted({h for cell in group["hosts"].dropna() for h in str(cell).split(";") if h})
    host_text = ", ".join(hosts[:3]) + (f" +{len(hosts) - 3} more" if len(hosts) > 3 else "")
    worlds = ", ".join(str(int(w)) for w in sorted(group["world_size"].dropna().unique()))
    dtype = "" if _latency_only(group) else f" · {values('dtype')}"
    return f"n={worlds} ranks · {values('backend')}{dtype} · {values('mode')} · host {host_text or 'unknown'}"


def _latency_only(group: pd.DataFrame) -> bool:
    """An op that moves no data (a barrier: S = 0, no bandwidth), as its rows show it."""
    measured = ok_rows(group)
    return not measured.empty and bool(measured["busbw_gbps"].isna().all() and (measured["size_bytes"] == 0).all())


def run_label_columns(group: pd.DataFrame) -> list[str]:
    """The fewest run columns (backend, world size, run) that, beside the variant, tell every line
    of a chart apart: two files of different backends read `flat (gloo)` and `flat (horovod)`, not
    `flat (gloo, gloo)` when the files are named after their backends."""
    candidates = [c for c in RUN_COLUMNS_BY_PREFERENCE if group[c].nunique() > 1]
    lines = group[["variant", *candidates]].drop_duplicates()
    for width in range(len(candidates) + 1):
        for subset in itertools.combinations(candidates, width):
            if not lines.duplicated(["variant", *subset]).any():
                return list(subset)
    return candidates


# Which run column names a line first: the backend and world size say more than a file name.
RUN_COLUMNS_BY_PREFERENCE = ("backend", "world_size", "run")


def _series(group: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """(label, rows sorted by size) per line; the label names the variant and whatever else differs."""
    varying = run_label_columns(group)
    for key, rows in group.groupby(list(SERIES_COLUMNS), sort=True):
        parts = dict(zip(SERIES_COLUMNS, key))
        extras = [f"n={int(parts[c])}" if c == "world_size" else str(parts[c]) for c in varying]
        label = parts["variant"] + (f" ({', '.join(extras)})" if extras else "")
        yield label, rows.sort_values("size_bytes")


def _size_axis(ax, sizes: Iterable[float], family: Family | None = None) -> None:
    """Log-2 size axis with human labels (8B, 1K, 1M): at the measured sizes when they are few,
    else at powers of two thinned to stay legible."""
    family = family or Family("")
    snap = round_size if family.workload == "size_bytes" else int  # 4K+8B is drawn at its 4K tick
    sizes = sorted({float(snap(int(s))) for s in sizes if s > 0})
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


def _size_chart(name: str, group: pd.DataFrame) -> Chart:
    measured = ok_rows(group)
    op, phase = measured["op"].iloc[0], measured["phase"].iloc[0]
    palette = op_palette(measured)
    series = sorted(_series(measured), key=palette.order)
    one_size = measured["size_bytes"].nunique() == 1
    multiples = not one_size and len(series) > MAX_BANDS
    # A latency-only op (a barrier: S = 0) has no bandwidth: one panel, and the caption says why.
    latency_only = _latency_only(measured)
    variants = len(palette.variants)
    width = 6.5 if latency_only else 12
    fig = Figure(figsize=(width, 4.8 + (2.6 * math.ceil(variants / 4) if multiples else 0)), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=(4.8, 2.6 * math.ceil(variants / 4))) if multiples else (fig, None)
    latency, busbw = (top.subplots(), None) if latency_only else top.subplots(1, 2)
    if one_size:
        _draw_bars(latency, busbw, series, palette)
    else:
        _draw_lines(latency, busbw, series, palette, bands=not multiples)
    if bottom is not None:
        _draw_multiples(bottom, series, palette)
    latency.set_title(
        "latency: p50 bars, 95% interval (black), min..p95 (gray)"
        if one_size
        else "latency" + (" (min..p95 bands below, per variant)" if multiples else "")
    )
    if busbw is not None:
        busbw.set_ylabel("busbw (GB/s, from p50 time)")
        busbw.set_ylim(bottom=0)
        busbw.set_title("bus bandwidth")
    what = (
        f"at its one workload size S = {format_size(int(measured['size_bytes'].iloc[0]))}"
        if one_size
        else "against size"
    )
    if latency_only:
        what += " (latency only: S = 0, no bandwidth)"
    facts, left_out = _facts(measured), _left_out(group)
    fig.suptitle(f"{op} · {phase}\n{facts}", fontsize=11)
    if left_out:
        fig.text(0.5, -0.03, left_out, ha="center", fontsize=8, color="dimgray")
    shown = "latency" if latency_only else "latency and busbw"
    caption = f"{op} ({phase}): {shown} {what}; {facts}." + (f" {left_out}" if left_out else "")
    return Chart(name=name, kind="size", figure=fig, caption=caption)


def draw_band(
    ax, rows: pd.DataFrame, low: str = "time_us_min", high: str = "time_us_p95", color: str = "C0", alpha: float = 0.18
) -> None:
    """One series' band between two columns against size (by default the min..p95 spread).

    min..p95: the fastest iteration bounds the low side; p95 rather than max on the high side,
    because one descheduled iteration on a shared machine would swamp the chart.
    """
    ax.fill_between(rows["size_bytes"], rows[low], rows[high], color=color, alpha=alpha, linewidth=0)


def draw_interval(ax, rows: pd.DataFrame, color: str = "C0") -> None:
    """One series' p50 interval (time_us_p50_lo..hi) as an error bar at each size."""
    ax.errorbar(rows["size_bytes"], rows["time_us_p50"], yerr=_interval(rows), fmt="none", ecolor=color, capsize=3)


def _latency_axis(ax) -> None:
    """Log latency axis with plain numbers (200, 1000, 5000 read faster than 2x10^2)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:,.0f}" if y >= 1 else f"{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _draw_lines(latency, busbw, series: list[tuple[str, pd.DataFrame]], palette: Palette, bands: bool = True) -> None:
    """A line per series against size: p50 (with its min..p95 band when few lines share the
    panel) for latency, busbw beside it; one legend, outside the data."""
    for label, rows in series:
        style = palette.style(rows)
        latency.plot(rows["size_bytes"], rows["time_us_p50"], markersize=4, label=label, **style)
        if bands:
            draw_band(latency, rows, color=style["color"])
            draw_interval(latency, rows, color=style["color"])
        if busbw is not None:
            busbw.plot(rows["size_bytes"], rows["busbw_gbps"], markersize=4, label=label, **style)
    sizes = pd.concat([rows["size_bytes"] for _, rows in series])
    for ax in (latency, busbw):
        if ax is not None:
            _size_axis(ax, sizes)
    _latency_axis(latency)
    latency.set_ylabel("time per op (µs): p50 line" + (" with its 95% interval, min..p95 band" if bands else ""))
    _legend_outside(busbw or latency)


def _draw_multiples(subfig, series: list[tuple[str, pd.DataFrame]], palette: Palette) -> None:
    """Small multiples: one latency panel per variant, its runs' p50 lines with their min..p95
    bands, on shared axes so panels compare at a glance."""
    variants = palette.variants
    columns = min(4, len(variants))
    axes = subfig.subplots(math.ceil(len(variants) / columns), columns, sharex=True, sharey=True, squeeze=False)
    sizes = pd.concat([rows["size_bytes"] for _, rows in series])
    for ax, variant in zip(axes.flat, variants):
        for _, rows in series:
            if rows["variant"].iloc[0] == variant:
                style = palette.style(rows)
                ax.plot(rows["size_bytes"], rows["time_us_p50"], markersize=3, label=f"_{variant}", **style)
                draw_band(ax, rows, color=style["color"])
                draw_interval(ax, rows, color=style["color"])
        ax.set_title(variant, fontsize=9, color=palette.color(variant))
        _size_axis(ax, sizes)
        ax.set_xlabel("")
        ax.tick_params(labelsize=7)
    _latency_axis(axes.flat[0])
    for ax in list(axes.flat)[len(variants) :]:
        ax.set_visible(False)
    subfig.supylabel("time per op (µs): p50, its 95% interval, min..p95", fontsize=8)
    subfig.supxlabel("size S in bytes", fontsize=8)


def _legend_outside(ax, **kwargs) -> None:
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


def _bars(
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
        _legend_outside(ax, handles=handles, title="run")
    return bars


def _draw_bars(latency, busbw, series: list[tuple[str, pd.DataFrame]], palette: Palette) -> None:
    """A bar per series when every row has one size (a fixed workload): a line would be a dot.
    Variants sort by their numeric meaning (bucketed_1MB before bucketed_25MB); each bar shows its value."""
    p50 = [float(rows["time_us_p50"].iloc[0]) for _, rows in series]
    spread = [
        [p - float(rows["time_us_min"].iloc[0]) for p, (_, rows) in zip(p50, series)],
        [float(rows["time_us_p95"].iloc[0]) - p for p, (_, rows) in zip(p50, series)],
    ]
    bars = _bars(latency, series, palette, p50, [f"{p:,.0f}" for p in p50], yerr=spread, capsize=3, ecolor="dimgray")
    centres = [bar.get_x() + bar.get_width() / 2 for bar in bars]
    firsts = pd.concat([rows.iloc[:1] for _, rows in series])
    latency.errorbar(centres, p50, yerr=_interval(firsts), fmt="none", ecolor="black", capsize=5, elinewidth=2)
    latency.set_ylabel("time per op (µs)")
    latency.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:,.0f}"))
    if busbw is None:  # latency only (a barrier): its panel keeps the legend
        return
    busbw_values = [float(rows["busbw_gbps"].iloc[0]) for _, rows in series]
    _bars(busbw, series, palette, busbw_values, [f"{b:.3g}" for b in busbw_values])
    if latency.get_legend() is not None:  # one legend per figure, beside the last panel
        latency.get_legend().remove()


def _interval(rows: pd.DataFrame) -> list:
    """Distances from the p50 down to its interval's low end and up to its high end (0 where a
    version-1 file has no interval)."""
    p50 = rows["time_us_p50"].to_numpy(dtype=float)
    lo = rows["time_us_p50_lo"].fillna(rows["time_us_p50"]).to_numpy(dtype=float)
    hi = rows["time_us_p50_hi"].fillna(rows["time_us_p50"]).to_numpy(dtype=float)
    return [p50 - lo, hi - p50]


def _left_out(group: pd.DataFrame) -> str:
    """Which rows a chart does not show and why, so that nothing disappears silently."""
    notes = []
    wrong = group[group["status"] == "wrong"]
    if not wrong.empty:
        notes.append(f"{len(wrong)} row(s) with wrong results not plotted")
    for _, row in group[group["status"] == "unavailable"].drop_duplicates(["variant", "backend"]).iterrows():
        notes.append(f"{row['variant']} unavailable on {row['backend']}: {row['note']}")
    return ("; ".join(notes) + ".") if notes else ""


def speedups(group: pd.DataFrame, family: Family) -> pd.DataFrame:
    """p50 time of the baseline variant / p50 time of each other variant, at equal everything else,
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


def _speedup_chart(name: str, group: pd.DataFrame, family: Family) -> Chart | None:
    joined = speedups(group, family)
    if joined.empty:
        return None
    op, phase, baseline, workload = joined["op"].iloc[0], joined["phase"].iloc[0], family.baseline, family.workload
    fig = Figure(figsize=(9, 4.8), layout="constrained")
    ax = fig.subplots()
    # Each variant keeps the colour it has on the size chart beside this one.
    palette = op_palette(ok_rows(group))
    series = sorted(_series(joined), key=palette.order)
    if joined[workload].nunique() == 1:
        # One workload: bars that start at the baseline (1x), up when faster, down when slower.
        speedup = [float(rows["speedup"].iloc[0]) for _, rows in series]
        firsts = pd.concat([rows.iloc[:1] for _, rows in series])
        bars = _bars(ax, series, palette, [v - 1 for v in speedup], [f"{v:.2f}x" for v in speedup], bottom=1)
        centres = [bar.get_x() + bar.get_width() / 2 for bar in bars]
        ax.errorbar(centres, speedup, yerr=_speedup_errors(firsts), fmt="none", ecolor="black", capsize=5)
        ax.set_xlabel(f"variant, at {family.workload_name} = {family.format(joined[workload].iloc[0])}")
    else:
        for i, (label, rows) in enumerate(series):
            # Lines a few percent of an octave apart, so that intervals at one workload do not hide each other.
            x = rows[workload] * 2 ** (0.04 * (i - (len(series) - 1) / 2))
            style = palette.style(rows)
            ax.plot(x, rows["speedup"], markersize=5, label=label, **style)
            ax.errorbar(x, rows["speedup"], yerr=_speedup_errors(rows), fmt="none", ecolor=style["color"], capsize=3)
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
        _size_axis(ax, joined[workload], family)
        _legend_outside(ax)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1, label=f"_{baseline}")
    _ratio_axis(ax, [float(v) for v in joined["speedup"]], _interval_ends(joined))
    ax.set_ylabel(f"speedup over {baseline}\n(p50 of {baseline} / p50)")
    fig.suptitle(
        f"{op} · {phase}: speedup over {baseline} with 95% intervals (above 1 = faster)\n{_facts(joined)}", fontsize=11
    )
    note = SPEEDUP_BARS_NOTE if joined[workload].nunique() == 1 else SPEEDUP_NOTE
    fig.text(0.5, -0.02, note, ha="center", fontsize=8, color="dimgray")
    caption = (
        f"{op} ({phase}): each variant's speedup over {baseline} for the same work "
        f"(equal {family.workload_name}), with its 95% interval; above 1 is faster; {_facts(joined)}."
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


def _ratio_axis(ax, values: list[float], extra: list[float] = ()) -> None:
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


def plot_beside(csv_path: Path, fmt: str = "png") -> list[Path]:
    """Charts of a finished run into charts_folder(csv_path), as `sweep` and `syncbn` do by default."""
    return plot_results([Path(csv_path)], charts_folder(Path(csv_path)), fmt)
