"""One self-contained HTML report of result CSVs: provenance, every chart embedded, the tables.

Charts are embedded as base64 data URIs and the style sheet is inline, so the single file can be
attached to a review or a ticket and opens anywhere without the CSVs beside it.
"""

from __future__ import annotations

import base64
import datetime
import html
from pathlib import Path

import pandas as pd

import commbench
from commbench.analysis.hosts_report import host_sections
from commbench.analysis.plotting import FORMATS, Chart, build_charts, ensure_folder, render
from commbench.errors import UserError
from commbench.results.reader import read_results
from commbench.units import format_size

_MIME = {"png": "image/png", "svg": "image/svg+xml"}
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1300px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; }
figcaption { font-size: 13px; color: #555; } code { font-size: 12px; }
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
    "time_us_p50",
    "time_us_p50_lo",
    "time_us_p50_hi",
    "time_us_p95",
    "time_us_max",
    "iters",
    "busbw_gbps",
    "wrong",
    "status",
)


def build_report(csv_paths: list[Path], fmt: str = "png", title: str = "commbench report") -> str:
    """The report as an HTML string."""
    if fmt not in FORMATS:
        raise UserError(f"unknown chart format {fmt!r}; choose one of {', '.join(FORMATS)}")
    frame = read_results(csv_paths)
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Made by commbench {commbench.__version__} at {stamp} from {len(csv_paths)} file(s). "
        "busbw follows nccl-tests' definition (algbw x bus factor; see <code>commbench list</code> for S per op); "
        "latency bands span min..p95 of the iterations.</p>",
        "<h2>Provenance</h2>",
        _table(_provenance(frame)),
        *host_sections(frame),
        "<h2>Charts</h2>",
    ]
    parts.extend(_figure(chart, fmt) for chart in build_charts(frame))
    parts.extend(_model_section(frame, fmt))
    parts.append("<h2>Results</h2>")
    measured = frame[frame["status"] != "unavailable"]
    for (op, phase), rows in measured.groupby(["op", "phase"], sort=True):
        parts.append(f"<h3>{html.escape(op)} · {html.escape(phase)}</h3>")
        columns = list(RESULT_COLUMNS) + [c for c in OVERLAP_COLUMNS if rows[c].notna().any()]
        parts.append(_table(rows.sort_values(["size_bytes", "variant", "run"])[columns]))
    unavailable = frame[frame["status"] == "unavailable"]
    if not unavailable.empty:
        parts.append("<h3>Not measured</h3>")
        parts.append(_table(unavailable[["op", "variant", "backend", "run", "note"]]))
    parts.append("</body></html>")
    return "\n".join(parts)


def _figure(chart: Chart, fmt: str) -> str:
    """A chart embedded as a data URI, with its caption."""
    data = base64.b64encode(render(chart, fmt)).decode("ascii")
    return (
        f"<figure><img alt='{html.escape(chart.name)}' src='data:{_MIME[fmt]};base64,{data}'>"
        f"<figcaption>{html.escape(chart.caption)}</figcaption></figure>"
    )


def write_report(csv_paths: list[Path], out: Path, fmt: str = "png") -> Path:
    """Build the report and write it to out, with one-line errors for an unusable destination."""
    if out.is_dir():
        raise UserError(f"--output {out} is a folder; give a file name such as {out / 'report.html'}")
    ensure_folder(out.parent)  # before the charts are drawn: fail in a second, not after a minute
    document = build_report(csv_paths, fmt)
    try:
        out.write_text(document, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror}") from None
    return out


def _provenance(frame: pd.DataFrame) -> pd.DataFrame:
    first = frame.groupby("run", sort=False).first().reset_index()
    return first[list(PROVENANCE_COLUMNS)]


def _table(frame: pd.DataFrame) -> str:
    """An HTML table with sizes in human units and numbers rounded for reading."""
    return frame.to_html(index=False, border=0, formatters={c: _formatter(c) for c in frame.columns})


def _formatter(column: str):
    """How one column's cells read: sizes in human units, whole-number columns as integers, other
    numbers to 4 significant digits, missing values as empty cells."""

    def cell(value: object) -> str:
        if value is None or value is pd.NA or (isinstance(value, float) and value != value):
            return ""
        if column == "size_bytes":
            return format_size(int(value))
        if isinstance(value, float):
            whole = value.is_integer() and column in ("world_size", "iters", "warmup", "wrong")
            return f"{int(value)}" if whole else f"{value:.4g}"
        return str(value)

    return cell


def _model_section(frame: pd.DataFrame, fmt: str) -> list[str]:
    """The latency-bandwidth fits (docs/model.md) with their charts; nothing when no op has enough sizes."""
    from commbench.analysis.model import fit_frame, model_charts

    fits, skipped = fit_frame(frame)
    if not fits:
        return []
    table = pd.DataFrame([f.as_dict() for f in fits])
    table = table[
        [
            "op",
            "variant",
            "phase",
            "dtype",
            "backend",
            "world_size",
            "sizes",
            "alpha_us",
            "beta_gbps",
            "half_size_bytes",
            "r2",
            "worst_residual",
        ]
    ]
    parts = [
        "<h2>Latency-bandwidth model</h2>",
        "<p>T(S) = alpha + S / beta fitted to the p50 times (robust, relative residuals); R^2 of log time. "
        "A fit with R^2 below 0.9 does not describe the data and is not projected (<code>commbench model</code>).</p>",
        _table(table),
    ]
    parts.extend(_figure(chart, fmt) for chart in model_charts(frame, fits))
    if skipped:
        parts.append("<p>Not fitted: " + html.escape("; ".join(skipped)) + "</p>")
    return parts
