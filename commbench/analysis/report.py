"""One self-contained HTML report of result CSVs: a summary, provenance, every chart embedded, the
tables, and a contents list to find them.

Charts are embedded as base64 data URIs and the style sheet is inline, so the single file can be
attached to a review or a ticket and opens anywhere without the CSVs beside it. Numbers read as a
person writes them: three significant digits with their unit (812 µs, 1.23 ms, 11 KB/s), sizes in
the one size format, empty cells for values a row does not have; noisy rows are marked.
"""

from __future__ import annotations

import base64
import datetime
import html
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

import commbench
from commbench.analysis.charts.grouping import chart_panels
from commbench.analysis.charts.plot import U, in_pool_while, panel_charts
from commbench.analysis.charts.render import FORMATS, Chart, render
from commbench.analysis.charts.runs import runs_chart
from commbench.analysis.hosts_report import host_sections
from commbench.analysis.runs import STOPPED, is_multi_run, largest_differences, run_colours, run_table, what_differs
from commbench.errors import UserError
from commbench.provenance import wall_time
from commbench.results.budget import Budget
from commbench.results.noise import NOISE_COLUMNS, NOISY, summarise_noise
from commbench.results.ownership import HTML_GENERATOR
from commbench.results.paths import write_atomically
from commbench.results.reader import read_results
from commbench.results.stats import HEADLINE, HEADLINE_HI, HEADLINE_LO, TYPICAL_NAME
from commbench.units import format_size

_MIME = {"png": "image/png", "svg": "image/svg+xml"}
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1300px; padding: 0 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; }
td { white-space: nowrap; } td.text { text-align: left; white-space: normal; }
tr.noisy td { background: #fff4e0; } .mark { color: #b35900; font-weight: 600; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; }
figcaption { font-size: 13px; color: #555; } code { font-size: 12px; }
ul.verdicts { font-size: 13px; margin-top: 0; }
nav.toc { margin: 1em 0; padding: 0.5em 1em; font-size: 13px; border: 1px solid #ddd; background: #fafafa; }
nav.toc ul { padding-left: 1.2em; margin: 0.2em 0; } nav.toc li { margin: 0.15em 0; }
p.summary { font-size: 15px; }
"""
# Provenance: what a reviewer needs to judge where numbers came from, one row per run.
PROVENANCE_COLUMNS = (
    "run",
    "source",
    "run_id",
    "backend",
    "world_size",
    "mode",
    "warmup",
    "hosts",
    "torch_version",
    "backend_version",
    "commbench_version",
    "command",
    "fingerprint",
)
# The per-(op, phase) result tables.
# Shown where a run measured them (--overlap).
OVERLAP_COLUMNS = ("comm_us", "compute_us", "overlapped_us", "overlap")
RESULT_COLUMNS = (
    "size_bytes",
    "variant",
    "backend",
    "run",
    "world_size",
    "dtype",
    "mode",
    "time_us_min",
    HEADLINE,
    HEADLINE_LO,
    HEADLINE_HI,
    "time_us_p50",
    "time_us_p95",
    "time_us_max",
    "iters",
    "busbw_gbps",
    "wrong",
    "status",
)


def build_report(csv_paths: list[Path], fmt: str = "png", title: str = "commbench report") -> str:
    """The report as an HTML string."""
    from commbench.analysis.model import fit_frame

    if fmt not in FORMATS:
        raise UserError(f"unknown chart format {fmt!r}; choose one of {', '.join(FORMATS)}")
    frame = read_results(csv_paths)
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    multi = is_multi_run(frame)
    colours = run_colours(frame)
    incomplete = {r for r in colours if frame[frame["run"] == r]["note"].str.contains(STOPPED, regex=False).any()}
    fits, skipped = fit_frame(frame)  # before the pool: its workers draw the model's charts from them
    # Every chart is drawn in plot's pool while this process writes the tables, which need no chart.
    charts, model_charts, (runs, provenance, results) = _drawn_charts(
        frame,
        fmt,
        (lambda name, group: runs_chart(name, group, colours, incomplete)) if multi else None,
        fits,
        lambda: (
            _runs_section(frame, colours) if multi else [],
            [_table(_provenance(frame)), *host_sections(frame)],
            _results_section(frame),
        ),
    )
    body: list[str | _Heading | _Drawn] = [
        _Heading(2, "Summary"),
        *_summary(frame, charts),
        *runs,
        _Heading(2, "Provenance"),
        *provenance,
        _Heading(2, "Charts"),
    ]
    for chart in charts:
        if chart.kind == "size":
            body.append(_Heading(3, chart.name.replace("-", " · "), anchor=f"chart-{chart.name}"))
        body.append(chart)
    body.extend(_model_section(fits, skipped, model_charts))
    body.extend(results)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'>{HTML_GENERATOR}<title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Made by commbench {commbench.__version__} at {stamp} from {len(csv_paths)} file(s). "
        "busbw follows nccl-tests' definition (algbw x bus factor; see <code>commbench list</code> for S per op); "
        "latency bands span min..p95 of the iterations; ± is half the 95% interval of the mean, the headline.</p>",
        _contents(body),
        *(
            part.html() if isinstance(part, _Heading) else _figure(part, fmt) if isinstance(part, _Drawn) else part
            for part in body
        ),
        "</body></html>",
    ]
    return "\n".join(parts)


def _results_section(frame: pd.DataFrame) -> list[str | _Heading]:
    """Per (op, phase) the table of its rows; then the rows not measured (unavailable)."""
    parts: list[str | _Heading] = [_Heading(2, "Results")]
    measured = frame[frame["status"] != "unavailable"]
    for (op, phase), rows in measured.groupby(["op", "phase"], sort=True):
        parts.append(_Heading(3, f"{op} · {phase}", anchor=f"results-{op}-{phase}"))
        columns = list(RESULT_COLUMNS) + [c for c in OVERLAP_COLUMNS if rows[c].notna().any()]
        parts.append(_table(rows.sort_values(["size_bytes", "variant", "run"])[[*columns, "note"]], marks=True))
    unavailable = frame[frame["status"] == "unavailable"]
    if not unavailable.empty:
        parts.append(_Heading(3, "Not measured"))
        parts.append(_table(unavailable[["op", "variant", "backend", "run", "note"]]))
    return parts


@dataclass(frozen=True)
class _Heading:
    """A heading of the page; the contents list is made of the headings in the page's order, so a
    section can be written before the ones above it (while the charts are drawn)."""

    level: int
    text: str
    anchor: str | None = None

    @property
    def id(self) -> str:
        return re.sub(r"[^A-Za-z0-9_-]+", "-", self.anchor or self.text).strip("-").lower()

    def html(self) -> str:
        return f"<h{self.level} id='{self.id}'>{html.escape(self.text)}</h{self.level}>"


def _contents(body: list) -> str:
    """The contents list of the page's headings: a section per line, its subsections after it on
    the same line: short, even for many ops."""
    sections: list[tuple[str, list[str]]] = []
    for heading in (part for part in body if isinstance(part, _Heading)):
        link = f"<a href='#{heading.id}'>{html.escape(heading.text)}</a>"
        if heading.level == 2 or not sections:
            sections.append((link, []))
        else:
            sections[-1][1].append(link)
    items = "".join(f"<li>{top}{': ' + ' · '.join(subs) if subs else ''}</li>" for top, subs in sections)
    return f"<nav class='toc'><strong>Contents</strong><ul>{items}</ul></nav>"


def _summary(frame: pd.DataFrame, charts: list[_Drawn]) -> list[str]:
    """The report's first answers: how many rows are noisy and what would help, and which variant
    each speedup chart finds fastest, and by how much."""
    measured = frame[frame["status"].isin(["ok", "wrong"])]
    parts = [f"<p class='summary'>{len(measured)} measured rows from {frame['run'].nunique()} run(s).</p>"]
    budget = Budget.from_command(str(frame["command"].dropna().iloc[0]) if frame["command"].notna().any() else "")
    # The runs' own measuring wall time where their .env.json recorded it: the advice the run printed.
    records = measured[[c for c in NOISE_COLUMNS if c in measured.columns]].to_dict("records")
    noise = summarise_noise(records, budget, wall_time([Path(s) for s in frame["source"].unique()]))
    if noise is not None:
        parts.append(
            f"<p class='summary'><span class='mark'>{noise.noisy} of {noise.measured} rows are {NOISY}</span> "
            f"(marked below: the mean's 95% interval is wider than 10% of it, or the rounds disagree by more "
            f"than 1.25x). Likely reason: {html.escape(noise.reason)}. What helps: "
            f"<code>{html.escape(noise.option)}</code> ({html.escape(noise.cost)}, estimated from the rows).</p>"
        )
    overall = [
        f"<li><a href='#{chart.name}'>{html.escape(chart.name.replace('-', ' · '))}</a>: {html.escape(note)}</li>"
        for chart in charts
        for note in chart.notes
        if "overall: " in note
    ]
    if overall:
        parts.append(
            "<p>Speedups, with 95% intervals (a verdict is called only where the interval excludes 1x; "
            "each chart lists every variant's):</p><ul class='verdicts'>" + "".join(overall) + "</ul>"
        )
    return parts


def _runs_section(frame: pd.DataFrame, colours: dict[str, str]) -> list[str | _Heading]:
    """Several runs: each run (its colour on every chart), what differs between them, and their
    largest differences against the first run given."""
    from matplotlib.colors import to_hex

    table = run_table(frame)
    swatch = {run: to_hex(colour) for run, colour in colours.items()}
    html_table = _table(table)
    for run, colour in swatch.items():  # the run's cell carries its chart colour
        cell = f"<td class='text'>{html.escape(run)}</td>"
        html_table = html_table.replace(
            cell, f"<td class='text'><span style='color:{colour}'>&#9632;</span> {html.escape(run)}</td>", 1
        )
    differs = what_differs(frame)
    parts: list[str | _Heading] = [
        _Heading(2, "Runs"),
        f"<p>{len(table)} runs, in the order given; the first, <strong>{html.escape(table['run'].iloc[0])}</strong>, "
        "is the baseline of the differences below. Each run has one colour on every chart.</p>",
        html_table,
        _Heading(3, "What differs between the runs"),
        "<ul class='verdicts'>" + "".join(f"<li>{html.escape(s)}</li>" for s in differs) + "</ul>"
        if differs
        else "<p>The runs agree on fingerprint, hosts, versions and options: what differs is the measurement.</p>",
    ]
    largest, notes = largest_differences(frame)
    parts.append(_Heading(3, "Largest differences"))
    if largest.empty:
        parts.append("<p>No row was measured by the first run and another.</p>")
    else:
        parts.append(
            "<p>The rows whose mean differs most from the first run's (ratio = run / first; the interval from "
            "the two intervals of the mean; the verdict is <code>commbench compare</code>'s, noise tests and Holm included):</p>"
        )
        parts.append(_table(largest.rename(columns={"baseline_us": "time_us_baseline"})))
    parts += [f"<p>{html.escape(note)}</p>" for note in notes]
    return parts


@dataclass(frozen=True)
class _Drawn:
    """A chart once rendered: what the page says of it and its image (the figure stays where it was drawn)."""

    name: str
    kind: str
    caption: str
    notes: tuple[str, ...]
    image: bytes

    @classmethod
    def of(cls, chart: Chart, fmt: str) -> _Drawn:
        return cls(chart.name, chart.kind, chart.caption, chart.notes, render(chart, fmt))


def _drawn_charts(
    frame: pd.DataFrame,
    fmt: str,
    sizes: Callable[[str, pd.DataFrame], Chart] | None,
    fits: list,
    meanwhile: Callable[[], U],
) -> tuple[list[_Drawn], list[_Drawn], U]:
    """Every chart `plot` draws for the frame (build_charts' charts, in its order) and the model's
    charts of the fits, each built and rendered a panel at a time in plot's pool of forked
    processes, as `plot` draws them: building and rendering are most of a report's time, and the
    same bytes come back as from a serial loop. meanwhile() runs here while the pool draws."""
    from commbench.analysis.model import model_charts, model_panels

    panels = list(chart_panels(frame))
    models = model_panels(fits)
    rows = dict(iter(frame.groupby(["op", "phase"], sort=False)))

    def draw(i: int) -> list[_Drawn]:
        if i < len(panels):
            return [_Drawn.of(chart, fmt) for chart in panel_charts(*panels[i], sizes)]
        return [
            _Drawn.of(chart, fmt) for chart in model_charts(_rows_of(models[i - len(panels)]), models[i - len(panels)])
        ]

    def _rows_of(fits: list) -> pd.DataFrame:  # the model chart's panel: its op and phase
        return rows.get((fits[0].key[1], fits[0].key[3]), frame.iloc[:0])

    def cost(i: int) -> int:  # the rows a panel draws: the pool starts the costliest first
        return len(panels[i][1]) if i < len(panels) else len(_rows_of(models[i - len(panels)]))

    drawn, extra = in_pool_while(draw, len(panels) + len(models), cost, meanwhile)
    charts = [chart for panel in drawn[: len(panels)] for chart in panel]
    return charts, [chart for panel in drawn[len(panels) :] for chart in panel], extra


def _figure(chart: _Drawn, fmt: str) -> str:
    """A chart embedded as a data URI, with its caption and what it lets a reader conclude."""
    data = base64.b64encode(chart.image).decode("ascii")
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in chart.notes)
    return (
        f"<figure id='{html.escape(chart.name)}'><img alt='{html.escape(chart.name)}' src='data:{_MIME[fmt]};base64,{data}'>"
        f"<figcaption>{html.escape(chart.caption)}</figcaption></figure>"
        + (f"<ul class='verdicts'>{notes}</ul>" if notes else "")
    )


def write_report(csv_paths: list[Path], out: Path, fmt: str = "png") -> Path:
    """Build the report and write it to out whole (a temporary name, then a rename); the caller has
    checked out may be written (commbench/results/paths.py's check_target)."""
    return write_atomically(out, build_report(csv_paths, fmt))


def _provenance(frame: pd.DataFrame) -> pd.DataFrame:
    first = frame.groupby("run", sort=False).first().reset_index()
    return first[list(PROVENANCE_COLUMNS)]


# Column titles for people; a unit goes into the cells, with the number.
TITLES = {
    "size_bytes": "size S",
    "world_size": "ranks",
    "time_us_min": "min",
    HEADLINE: "mean",
    HEADLINE_LO: "±",
    "time_us_p50": "p50",
    "time_us_p95": "p95",
    "time_us_max": "max",
    "busbw_gbps": "busbw",
    "alpha_us": "alpha",
    "beta_gbps": "beta",
    "half_size_bytes": "n1/2",
    "r2": "R²",
    "worst_residual": "worst residual",
    "comm_us": "comm",
    "time_us_baseline": "first run mean",
    "ratio": "ratio",
    "compute_us": "compute",
    "overlapped_us": "overlapped",
}
_COUNTS = ("world_size", "iters", "warmup", "wrong", "sizes")


def _table(frame: pd.DataFrame, marks: bool = False) -> str:
    """An HTML table with numbers for people: sizes in the size format, times and bandwidths to three
    significant digits with their unit, missing values as empty cells. `marks`: rows whose note
    says noisy get a mark and a tint. The mean's interval shows as ± (half its width, in percent)."""
    columns = [c for c in frame.columns if c not in (HEADLINE_HI, "note") or (c == "note" and marks)]
    head = "".join(f"<th>{html.escape(TITLES.get(c, c))}</th>" for c in columns)
    if marks:
        head += "<th></th>"
    # Column by column, each distinct cell formatted once (a run repeats its backend, dtype and
    # iterations on every row): a report of many rows writes many cells.
    by_column = [_column_cells(c, frame) for c in columns]
    notes = frame["note"].tolist() if marks and "note" in frame.columns else [None] * len(frame)
    rows = []
    for cells, note in zip(zip(*by_column), notes):
        line = "".join(cells)
        noisy = marks and NOISY in str(note or "")
        if marks:
            line += f"<td class='mark'>{NOISY if noisy else ''}</td>"
        rows.append(f"<tr class='noisy'>{line}</tr>" if noisy else f"<tr>{line}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _column_cells(column: str, frame: pd.DataFrame) -> list[str]:
    """The <td> of each row of one column (_cell's, formatted once per distinct value where the
    cell does not depend on the row's other columns)."""
    if column == HEADLINE_LO:  # the half-width of the interval, in percent of the mean: from three columns
        return _half_width_cells(frame)
    series = frame[column]
    number = column != "note" and pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
    if number or isinstance(series.dtype, pd.StringDtype):
        # One type: its distinct values found by pandas, none missing (NaN and NA are code -1). A
        # number is never text and its text holds none of html's specials: it needs none of _cell's checks.
        codes, distinct = pd.factorize(series)
        if number:
            text = _number_format(column)
            cells = [f"<td>{text(value)}</td>" for value in distinct.tolist()]
        else:
            cells = [_cell(column, {column: value}) for value in distinct.tolist()]
        cells.append(_cell(column, {column: None}))  # code -1: the missing cell
        return [cells[code] for code in codes.tolist()]
    done: dict[object, str] = {}
    cells = []
    for value in frame[column].tolist():
        key = (type(value), None if _missing(value) else value)  # NaN and NA are no dict keys of themselves
        try:
            cell = done.get(key)
        except TypeError:  # an unhashable cell: formatted on its own
            cells.append(_cell(column, {column: value}))
            continue
        if cell is None:
            cell = done[key] = _cell(column, {column: value})
        cells.append(cell)
    return cells


def _half_width_cells(frame: pd.DataFrame) -> list[str]:
    """The ± cells: half the mean's interval in percent of the mean (as _format words one), empty
    where a row has no interval; computed over the columns at once (a report of 100,000 rows)."""
    lo = pd.to_numeric(frame[HEADLINE_LO], errors="coerce")
    hi = pd.to_numeric(frame[HEADLINE_HI], errors="coerce") if HEADLINE_HI in frame.columns else lo * math.nan
    mean = pd.to_numeric(frame[HEADLINE], errors="coerce") if HEADLINE in frame.columns else lo * math.nan
    half = ((hi - lo) / 2 / mean.where(mean != 0)).tolist()
    return [f"<td>{h:.1%}</td>" if h == h else "<td></td>" for h in half]


def _cell(column: str, record: dict) -> str:
    value = record.get(column)
    text = "" if _missing(value) else _format(column, value)
    align = " class='text'" if isinstance(value, str) or column == "note" else ""
    return f"<td{align}>{html.escape(text)}</td>"


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and value != value) or value == ""


def _format(column: str, value: object) -> str:
    """One cell as a person reads it (see _table; the ± column is _half_width_cells')."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    return _number_format(column)(value)


def _number_format(column: str) -> Callable[[float], str]:
    """How a number of the column reads, where its text depends on the number alone (see _format)."""
    if column in ("size_bytes", "half_size_bytes"):
        return lambda value: format_size(int(max(value, 0)))
    if column in _COUNTS:
        return lambda value: f"{int(value):,}"
    if column.endswith("_us") or column.startswith("time_us_"):
        return format_time_us
    if column.endswith("_gbps"):
        return format_bandwidth
    if column == "worst_residual":
        return lambda value: f"{value:.1%}"
    if column == "ratio":
        return lambda value: f"{value:.2f}x"
    if column in ("r2", "overlap"):
        return lambda value: f"{value:.3f}"
    return significant


def significant(value: float, digits: int = 3) -> str:
    """A number to `digits` significant digits (trailing zeros dropped), never in scientific notation:
    0.000123, 12.3, 2.5, 45,600."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    place = digits - 1 - math.floor(math.log10(abs(value)))  # negative: round to tens, hundreds...
    if place <= 0:
        return f"{round(value, place):,.0f}"
    # The format rounds to `place` decimals itself, as round() would (both correctly rounded).
    return f"{value:,.{place}f}".rstrip("0").rstrip(".")


def format_time_us(us: float) -> str:
    """A time in µs, ms or s to three significant digits: 812 µs, 1.23 ms, 2.5 s."""
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if abs(us) >= scale:
            return f"{significant(us / scale)} {unit}"
    return f"{significant(us)} µs"


def format_bandwidth(gbps: float) -> str:
    """A bandwidth given in GB/s, in the unit that reads best: 2.31 GB/s, 840 MB/s, 11 KB/s."""
    for unit, scale in (("GB/s", 1.0), ("MB/s", 1e-3), ("KB/s", 1e-6)):
        if abs(gbps) >= scale:
            return f"{significant(gbps / scale)} {unit}"
    return f"{significant(gbps * 1e9)} B/s"


def _model_section(fits: list, skipped: list[str], charts: list[_Drawn]) -> list[str | _Heading | _Drawn]:
    """The latency-bandwidth fits (docs/model.md) with their charts; nothing when no op has enough
    sizes. Fits that do not describe their data are listed apart, as refused, with the reason."""
    from commbench.analysis.model import FIT_KEY, MIN_R2

    if not fits:
        return []
    key = [*FIT_KEY, "sizes"]
    parts: list[str | _Heading | _Drawn] = [
        _Heading(2, "Latency-bandwidth model"),
        f"<p>T(S) = alpha + S / beta fitted to the {TYPICAL_NAME} times (robust, relative residuals); R² of log time. "
        f"A fit with R² below {MIN_R2} does not describe the data: it is refused, listed apart and not projected "
        "(<code>commbench model</code>).</p>",
    ]
    if any(f.fits for f in fits):
        table = pd.DataFrame([f.as_dict() for f in fits if f.fits])
        parts.append(_table(table[[*key, "alpha_us", "beta_gbps", "half_size_bytes", "r2", "worst_residual"]]))
    refused = [f for f in fits if not f.fits]
    if refused:
        rows = pd.DataFrame([{**dict(zip(key, [f.as_dict()[k] for k in key])), "refused": f.refusal} for f in refused])
        parts += [_Heading(3, "Refused fits"), _table(rows)]
    parts.extend(charts)
    if skipped:
        parts.append("<p>Not fitted: " + html.escape("; ".join(skipped)) + "</p>")
    return parts
