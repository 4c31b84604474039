"""Where a chart's panels sit: margins and gaps in inches, fixed when the figure is built.

matplotlib's constrained layout measured every tick label of every panel before each draw, a
third of what a chart cost (docs/charts.md). A chart's geometry is known when it is built (its
size, how many panels, how many title lines), and the saved image is cropped to what is drawn
(render's bbox_inches="tight"), so what hangs outside the figure (a legend to the right of the
panels, a note below them, the widest tick labels) is kept, never clipped. These margins only keep
the figure's own texts off one another: the title off the panels' titles, a panel's tick labels
and y label off its left neighbour, a row's x labels off the titles of the row below.

Texts whose width depends on the data (y tick labels: 50 or 1,000,000) sit on the outer edges or
beside a panel's own axis, where matplotlib places each label past its own tick labels at draw
time: the labels shared by a grid of panels are the y label of its first panel and the x label
of its last row's first panel, stretched over the grid (shared_labels).
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes

# Inches. A line of text at font size f points is about 1.3 f / 72 inches high, leading included.
TITLE_PAD = 0.08  # from the figure's top edge to its title's first line
PANEL_TITLE = 0.36  # a panel's title at the default 12 points, with its pad above the panel
X_LABELS = 0.62  # a panel's x tick labels and x label at the default 10 points, below the panel
Y_LABELS = 1.0  # a panel's y tick labels (up to 1,000,000) and y label, left of the panel
ROTATED_LABELS = 1.05  # variant names under bars (axes.bar_group rotates them), instead of X_LABELS


def line_height(points: float) -> float:
    """Inches a line of text of that font size takes."""
    return 1.3 * points / 72


def grid(
    width: float,
    height: float,
    *,
    top: float,
    bottom: float = X_LABELS,
    left: float = Y_LABELS,
    right: float = 0.2,
    columns: int = 1,
    rows: int = 1,
    wspace: float = 0.0,
    hspace: float = 0.0,
) -> dict[str, float]:
    """gridspec_kw for a rows x columns grid of panels in a (sub)figure of width x height inches,
    with these margins and these gaps between panels, all in inches."""
    panel_width = (width - left - right - wspace * (columns - 1)) / columns
    panel_height = (height - top - bottom - hspace * (rows - 1)) / rows
    if panel_width <= 0 or panel_height <= 0:
        raise ValueError(f"a {width} x {height} in figure has no room for {rows} x {columns} panels")
    return {
        "left": left / width,
        "right": 1 - right / width,
        "top": 1 - top / height,
        "bottom": bottom / height,
        "wspace": wspace / panel_width,
        "hspace": hspace / panel_height,
    }


def title_margin(title_lines: int, fontsize: float = 11, panel_titles: float = PANEL_TITLE) -> float:
    """The top margin under a figure title of that many lines (suptitle), with room for the
    panels' own titles (panel_titles inches; 0.1 where the panels have none)."""
    return TITLE_PAD + title_lines * line_height(fontsize) + panel_titles


def suptitle(fig, text: str, height: float, place: dict[str, float], fontsize: float = 11) -> None:
    """The figure's title, its first line TITLE_PAD below the top edge of a figure `height` inches
    high, centred over the panels that `place` (grid's) puts in it: the image is cropped to what is
    drawn, so the figure's own centre is not the image's where the legend takes less room than kept."""
    x = (place["left"] + place["right"]) / 2
    fig.suptitle(text, fontsize=fontsize, x=x, y=1 - TITLE_PAD / height, va="top")


def shared_labels(panels: Sequence[Sequence[Axes]], ylabel: str, xlabel: str, fontsize: float = 9) -> None:
    """One y label for a grid of panels (rows of axes, all placed), centred on the grid's height,
    and one x label under its last row, centred on the grid's width; each is set on a panel, so
    matplotlib puts it past that panel's own tick labels when it draws."""
    first, last_row = panels[0][0], panels[-1][0]
    top, bottom = first.get_position(), last_row.get_position()
    right = panels[0][-1].get_position()
    first.set_ylabel(ylabel, fontsize=fontsize)
    first.yaxis.label.set_y(((top.y1 + bottom.y0) / 2 - top.y0) / top.height)
    last_row.set_xlabel(xlabel, fontsize=fontsize)
    last_row.xaxis.label.set_x(((bottom.x0 + right.x1) / 2 - bottom.x0) / bottom.width)
