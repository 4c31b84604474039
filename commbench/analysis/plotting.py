"""Charts of result CSVs: latency and busbw against size, and speedups within variant families.

Figures are built as matplotlib `Figure` objects drawn by the Agg canvas, never through pyplot:
no global figure state, no display needed, and tests can inspect what `build_charts` returns.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

from commbench.errors import UserError
from commbench.results.reader import ok_rows, read_results
from commbench.units import format_size

FORMATS = ("png", "svg")


SIZE_AXIS_LABEL = "size S (bytes, as `commbench list` defines S per op)"


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

    def format(self, value: float) -> str:
        return format_size(int(value)) if self.workload == "size_bytes" else str(int(value))


def speedup_family(op: str) -> Family | None:
    """The op's variant family, as its spec declares it; None for ops without a baseline."""
    from commbench.ops import spec_of

    spec = spec_of(op)
    if spec is None or spec.baseline is None:
        return None
    return Family(spec.baseline, spec.workload_column, spec.workload_name)


# What distinguishes two lines on one chart; the label shows only the parts that differ.
SERIES_COLUMNS = ("backend", "variant", "run", "world_size")
_MAX_TICKS = 12


@dataclass
class Chart:
    """One figure, the file stem it is saved under, and a sentence saying what it shows."""

    name: str
    kind: str  # "size" (latency and busbw against size) or "speedup"
    figure: Figure
    caption: str


def charts_folder(csv_path: Path) -> Path:
    """Where `commbench sweep` puts a run's charts: <csv stem>-charts/ beside the CSV."""
    csv_path = Path(csv_path)
    return csv_path.with_name(csv_path.stem + "-charts")


def plot_results(csv_paths: list[Path], out_dir: Path, fmt: str = "png") -> list[Path]:
    """Read result CSVs, write one file per chart into out_dir, and return the paths written."""
    if fmt not in FORMATS:
        raise UserError(f"unknown chart format {fmt!r}; choose one of {', '.join(FORMATS)}")
    charts = build_charts(read_results(csv_paths))
    if not charts:
        raise UserError(f"nothing to plot in {', '.join(map(str, csv_paths))}: no row has status ok")
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
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the output folder {folder}: {exc.strerror}") from None
    if not os.access(folder, os.W_OK):
        raise UserError(f"cannot write into the output folder {folder}: permission denied")
    return folder


def render(chart: Chart, fmt: str) -> bytes:
    """The chart encoded as PNG or SVG bytes."""
    buf = io.BytesIO()
    FigureCanvasAgg(chart.figure)  # attaches the Agg canvas: no GUI backend is ever chosen
    chart.figure.savefig(buf, format=fmt, dpi=110, bbox_inches="tight")
    return buf.getvalue()


def build_charts(frame: pd.DataFrame) -> list[Chart]:
    """Every chart for a frame from read_results: per (op, phase) the size chart, then its speedups."""
    charts: list[Chart] = []
    for name, group in _panels(frame):
        if not ok_rows(group).empty:
            charts.append(_size_chart(name, group))
        family = speedup_family(group["op"].iloc[0])
        if family and (speedup := _speedup_chart(name, group, family)):
            charts.append(speedup)
    return charts


def _panels(frame: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """Groups of rows that share a chart: one per (op, phase), split by dtype and mode when mixed."""
    measured = frame[frame["phase"] != ""]  # unavailable rows have no phase; they go in captions
    split = [c for c in ("dtype", "mode") if measured[c].nunique() > 1]
    for key, group in measured.groupby(["op", "phase", *split], sort=True):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(map(str, key)))
        unavailable = frame[(frame["op"] == key[0]) & (frame["status"] == "unavailable")]
        yield name, pd.concat([group, unavailable])


def _facts(group: pd.DataFrame) -> str:
    """World size, backend, dtype, mode and hosts of the rows on a chart, for its title."""

    def values(column: str) -> str:
        return ", ".join(sorted({str(v) for v in group[column].dropna() if str(v)}))

    hosts = sorted({h for cell in group["hosts"].dropna() for h in str(cell).split(";") if h})
    host_text = ", ".join(hosts[:3]) + (f" +{len(hosts) - 3} more" if len(hosts) > 3 else "")
    worlds = ", ".join(str(int(w)) for w in sorted(group["world_size"].dropna().unique()))
    return (
        f"n={worlds} ranks · {values('backend')} · {values('dtype')} · {values('mode')} · host {host_text or 'unknown'}"
    )


def _series(group: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """(label, rows sorted by size) per line; the label names the variant and whatever else differs."""
    varying = [c for c in SERIES_COLUMNS if c != "variant" and group[c].nunique() > 1]
    for key, rows in group.groupby(list(SERIES_COLUMNS), sort=True):
        parts = dict(zip(SERIES_COLUMNS, key))
        extras = [f"n={int(parts[c])}" if c == "world_size" else str(parts[c]) for c in varying]
        label = parts["variant"] + (f" ({', '.join(extras)})" if extras else "")
        yield label, rows.sort_values("size_bytes")


def _size_axis(ax, sizes: Iterable[float], family: Family | None = None) -> None:
    """Log-2 size axis with human labels (8B, 1K, 1M): at the measured sizes when they are few,
    else at powers of two thinned to stay legible."""
    sizes = sorted({float(s) for s in sizes if s > 0})
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
    family = family or Family("")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: family.format(round(x))))
    ax.set_xlabel(family.axis_label)
    ax.grid(True, which="major", alpha=0.3)


def _size_chart(name: str, group: pd.DataFrame) -> Chart:
    measured = ok_rows(group)
    op, phase = measured["op"].iloc[0], measured["phase"].iloc[0]
    fig = Figure(figsize=(12, 4.8))
    latency, busbw = fig.subplots(1, 2)
    series = list(_series(measured))
    one_size = measured["size_bytes"].nunique() == 1
    (_draw_bars if one_size else _draw_lines)(latency, busbw, series)
    latency.set_title("latency")
    busbw.set_ylabel("busbw (GB/s, from p50 time)")
    busbw.set_ylim(bottom=0)
    busbw.set_title("bus bandwidth")
    what = (
        f"at its one workload size S = {format_size(int(measured['size_bytes'].iloc[0]))}"
        if one_size
        else "against size"
    )
    facts, left_out = _facts(measured), _left_out(group)
    fig.suptitle(f"{op} · {phase}\n{facts}", fontsize=11)
    if left_out:
        fig.text(0.5, -0.02, left_out, ha="center", fontsize=8, color="dimgray")
    caption = f"{op} ({phase}): latency and busbw {what}; {facts}." + (f" {left_out}" if left_out else "")
    fig.tight_layout()
    return Chart(name=name, kind="size", figure=fig, caption=caption)


def _draw_lines(latency, busbw, series: list[tuple[str, pd.DataFrame]]) -> None:
    """A line per series against size: p50 with a min..p95 band for latency, busbw beside it."""
    for label, rows in series:
        size = rows["size_bytes"]
        (line,) = latency.plot(size, rows["time_us_p50"], marker="o", markersize=3, label=label)
        # min..p95: the fastest iteration bounds the low side; p95 rather than max on the high
        # side, because one descheduled iteration on a shared machine would swamp the chart.
        latency.fill_between(size, rows["time_us_min"], rows["time_us_p95"], color=line.get_color(), alpha=0.18)
        latency.errorbar(
            size, rows["time_us_p50"], yerr=_interval(rows), fmt="none", ecolor=line.get_color(), capsize=3
        )
        busbw.plot(size, rows["busbw_gbps"], marker="o", markersize=3, label=label, color=line.get_color())
    sizes = pd.concat([rows["size_bytes"] for _, rows in series])
    _size_axis(latency, sizes)
    _size_axis(busbw, sizes)
    latency.set_yscale("log")
    # Plain numbers (200, 1000, 5000) read faster than 2x10^2 on a latency axis.
    latency.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    latency.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:,.0f}" if y >= 1 else f"{y:g}"))
    latency.yaxis.set_minor_formatter(NullFormatter())
    latency.set_ylabel("time per op (µs): p50 line with its 95% interval, min..p95 band", fontsize=9)
    busbw.legend(fontsize="small", loc="upper left")


def _draw_bars(latency, busbw, series: list[tuple[str, pd.DataFrame]]) -> None:
    """A bar per series when every row has one size (a fixed workload): a line would be a dot."""
    labels = [label for label, _ in series]
    rows = pd.concat([r for _, r in series])
    colors = [f"C{i}" for i in range(len(series))]
    p50 = rows["time_us_p50"].to_numpy()
    spread = [p50 - rows["time_us_min"].to_numpy(), rows["time_us_p95"].to_numpy() - p50]
    latency.bar(labels, p50, yerr=spread, color=colors, capsize=4, error_kw={"alpha": 0.5})
    latency.errorbar(labels, p50, yerr=_interval(rows), fmt="none", ecolor="black", capsize=6, elinewidth=2)
    latency.set_ylabel("time per op (µs): p50 bar with its 95% interval, min..p95 whisker", fontsize=9)
    latency.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:,.0f}"))
    busbw.bar(labels, rows["busbw_gbps"].to_numpy(), color=colors)
    for ax in (latency, busbw):
        ax.tick_params(axis="x", labelrotation=20)
        ax.grid(True, axis="y", alpha=0.3)


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
    """p50 time of the baseline variant / p50 time of each other variant, at equal everything else.

    Above 1 means the variant is faster than the baseline. Only workloads measured by both count.
    """
    measured = ok_rows(group)
    same = ["backend", "run", "world_size", "op", "phase", "dtype", "mode", family.workload]
    base = measured[measured["variant"] == family.baseline][[*same, "time_us_p50"]]
    others = measured[measured["variant"] != family.baseline]
    joined = others.merge(base, on=same, suffixes=("", "_baseline"))
    joined["speedup"] = joined["time_us_p50_baseline"] / joined["time_us_p50"]
    return joined.sort_values(family.workload)


def _speedup_chart(name: str, group: pd.DataFrame, family: Family) -> Chart | None:
    joined = speedups(group, family)
    if joined.empty:
        return None
    op, phase, baseline, workload = joined["op"].iloc[0], joined["phase"].iloc[0], family.baseline, family.workload
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.subplots()
    series = list(_series(joined))
    # Each variant keeps the colour it has on the size chart beside this one.
    palette = {label: f"C{i}" for i, (label, _) in enumerate(_series(ok_rows(group)))}
    colors = [palette.get(label, f"C{i}") for i, (label, _) in enumerate(series)]
    if joined[workload].nunique() == 1:
        # One workload: bars that start at the baseline (1x) and grow up when faster.
        speedup = [float(rows["speedup"].iloc[0]) for _, rows in series]
        ax.bar([label for label, _ in series], [v - 1 for v in speedup], bottom=1, color=colors)
        ax.tick_params(axis="x", labelrotation=20)
        ax.set_xlabel(f"variant, at {family.workload_name} = {family.format(joined[workload].iloc[0])}")
    else:
        for (label, rows), color in zip(series, colors):
            ax.plot(rows[workload], rows["speedup"], marker="o", markersize=3, label=label, color=color)
        _size_axis(ax, joined[workload], family)
        ax.legend(fontsize="small")
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1, label=f"_{baseline}")
    # Log scale: 2x faster and 2x slower sit at equal distances from the baseline's line.
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}x"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel(f"speedup over {baseline} (p50 time of {baseline} / p50 time)")
    fig.suptitle(f"{op} · {phase}: speedup over {baseline} (above 1 = faster)\n{_facts(joined)}", fontsize=11)
    fig.tight_layout()
    caption = (
        f"{op} ({phase}): each variant's speedup over {baseline} for the same work "
        f"(equal {family.workload_name}); above 1 is faster; {_facts(joined)}."
    )
    return Chart(name=f"{name}-speedup", kind="speedup", figure=fig, caption=caption)


def plot_beside(csv_path: Path, fmt: str = "png") -> list[Path]:
    """Charts of a finished run into charts_folder(csv_path), as `sweep` and `syncbn` do by default."""
    return plot_results([Path(csv_path)], charts_folder(Path(csv_path)), fmt)
