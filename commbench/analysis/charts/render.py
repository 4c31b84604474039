"""A chart (figure, file stem, caption), its PNG or SVG bytes, and the folders charts go into."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import commbench
from commbench.errors import UserError
from commbench.results.ownership import WRITTEN_BY
from commbench.results.paths import beside, check_target, make_folder, write_atomically

if TYPE_CHECKING:  # matplotlib is imported where a chart is drawn: naming a chart folder stays cheap
    from matplotlib.figure import Figure

FORMATS = ("png", "svg")
DPI = 110


@dataclass
class Chart:
    """One figure, the file stem it is saved under, and a sentence saying what it shows."""

    name: str
    kind: str  # "size", "overlap", "speedup", "model" or "trend": the module that drew it
    figure: Figure
    caption: str
    notes: tuple[str, ...] = ()  # what the chart lets a reader conclude (a speedup chart's verdicts)


CHARTS_BESIDE = "-charts/"  # a run's charts folder, as paths.beside names it (a folder: the slash)


def charts_folder(csv_path: Path) -> Path:
    """Where `commbench sweep` puts a run's charts: <csv stem>-charts/ beside the CSV."""
    return beside(csv_path, CHARTS_BESIDE.rstrip("/"))


def write_charts(charts: list[Chart], out_dir: Path, fmt: str, overwrite: bool = False) -> list[Path]:
    """One file per chart in out_dir (created), each written whole or not at all; an existing chart
    is replaced only with overwrite. Returns the paths written."""
    out_dir = ensure_folder(Path(out_dir))
    refuse_existing([out_dir / f"{chart.name}.{fmt}" for chart in charts], overwrite)
    return [write_atomically(out_dir / f"{chart.name}.{fmt}", render(chart, fmt)) for chart in charts]


def refuse_existing(paths: list[Path], overwrite: bool, inputs: tuple[Path, ...] = ()) -> None:
    """Before anything is drawn: without overwrite none of the chart files exists yet (one line
    names how many do), and every one may be written (commbench/results/paths.py's rule)."""
    existing = [p for p in paths if os.path.lexists(p)]
    if existing and not overwrite:
        more = f" and {len(existing) - 1} more" if len(existing) > 1 else ""
        raise UserError(
            f"{existing[0]}{more} already exist{'s' if len(existing) == 1 else ''}; pass --overwrite to replace them, "
            "or -o another folder"
        )
    for path in paths:
        check_target(path, overwrite, inputs, flag="chart")


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
    from matplotlib import rcParams
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    buf = io.BytesIO()
    figure = chart.figure
    canvas = FigureCanvasAgg(figure)  # attaches the Agg canvas: no GUI backend is ever chosen
    # PNG at zlib level 1: encoding at the default level took about 15% of the drawing time,
    # for files under a tenth smaller.
    extra = {"pil_kwargs": {"compress_level": 1}} if fmt == "png" else {}
    # A PNG's tight box, measured here on the Agg renderer that then draws it, rather than by
    # bbox_inches="tight": that draws the whole figure once more, without output, first (about 15%
    # of a chart's time). The same box, so the same bytes, where no layout engine needs that draw.
    tight: object = "tight"
    if fmt == "png" and figure.get_layout_engine() is None:
        figure.dpi = DPI
        tight = figure.get_tightbbox(canvas.get_renderer()).padded(rcParams["savefig.pad_inches"])
    # Signed as commbench's, so that --overwrite may replace it later (results/ownership.py).
    signed = {"metadata": {"Software" if fmt == "png" else "Creator": f"{WRITTEN_BY} {commbench.__version__}"}}
    figure.savefig(buf, format=fmt, dpi=DPI, bbox_inches=tight, **extra, **signed)
    return buf.getvalue()
