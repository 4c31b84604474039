"""The trend chart: one row's p50 (or a whole series') across the runs of a history, coloured by
fingerprint, with every fingerprint change marked, so "it got slower after the driver upgrade" is
one picture; behind each fingerprint's points its run-to-run band, what counts as a change there."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure

from commbench.analysis.charts.render import Chart
from commbench.errors import UserError
from commbench.results.reader import ok_rows
from commbench.results.schema import SERIES_KEY
from commbench.units import format_size


@dataclass(frozen=True)
class Point:
    """One run on the chart."""

    run_id: str
    started_at: str
    fingerprint: str
    value: float
    low: float
    high: float
    status: str = "complete"  # the history's: incomplete when the run stopped before its last row
    sizes: int = 1  # sizes behind the point (an incomplete run's index rests on fewer)

    @property
    def complete(self) -> bool:
        return self.status in ("complete", "")


def one_series(frame: pd.DataFrame, wanted: str, options: dict[str, str] | None = None) -> pd.DataFrame:
    """The rows of the single series the filters leave; refused, naming what differs and the
    option (options: column -> option) that narrows each, when several."""
    rows = ok_rows(frame)
    if rows.empty:
        raise UserError(f"no measured row in the history matches {wanted}; `commbench history list` shows the runs")
    keys = rows[list(SERIES_KEY)].drop_duplicates()
    if len(keys) > 1:
        split = [c for c in SERIES_KEY if keys[c].nunique() > 1]
        differ = [f"{c} {', '.join(sorted(map(str, keys[c].unique())))}" for c in split]
        named = [(options or {}).get(c) for c in split]
        how = (
            f"narrow it with {', '.join(n for n in named if n)}"
            if all(named)
            else "narrow it with the options for them"
        )
        raise UserError(f"{wanted} matches {len(keys)} series ({'; '.join(differ)}): {how}")
    return rows


def points(rows: pd.DataFrame, size: int | None) -> tuple[list[Point], str]:
    """Per run: the size's p50 and interval; without a size, the series' index (each size's p50
    over its median across the runs, geometric mean over sizes) with the interval scaled alike."""
    if size is not None:
        rows = rows[rows["size_bytes"] == size]
        if rows.empty:
            raise UserError(f"no run measured size {size} B of this series; `commbench history show RUN` lists sizes")
        found = [
            Point(
                r.run_id,
                r.history_started_at,
                r.history_fingerprint,
                r.time_us_p50,
                r.time_us_p50_lo,
                r.time_us_p50_hi,
                getattr(r, "history_status", "complete"),
            )
            for r in rows.itertuples()
        ]
        return found, "p50 (us), with its 95% interval"
    median = rows.groupby("size_bytes")["time_us_p50"].median()
    found = []
    for run_id, run in rows.groupby("run_id", sort=False):
        scale = run["size_bytes"].map(median)
        logs = {c: (run[c] / scale).map(_log) for c in ("time_us_p50", "time_us_p50_lo", "time_us_p50_hi")}
        geo = {c: math.exp(v.mean()) if v.notna().any() else math.nan for c, v in logs.items()}
        first = run.iloc[0]
        found.append(
            Point(
                str(run_id),
                first["history_started_at"],
                first["history_fingerprint"],
                geo["time_us_p50"],
                geo["time_us_p50_lo"],
                geo["time_us_p50_hi"],
                str(first.get("history_status", "complete")),
                int(run["size_bytes"].nunique()),
            )
        )
    sizes = rows["size_bytes"].nunique()
    return found, f"p50 / median run (geo. mean, {sizes} sizes)"


def _log(x: float) -> float:
    return math.log(x) if x and x > 0 else math.nan


def trend_chart(rows: pd.DataFrame, size: int | None, name: str = "trend") -> Chart:
    """The chart of one series (or one size of it) across runs, oldest left."""
    found, ylabel = points(rows, size)
    found.sort(key=lambda p: p.started_at)
    first = rows.iloc[0]
    what = f"{first['op']}/{first['variant']}/{first['phase']} {first['dtype']} {first['mode']} n={int(first['world_size'])}"
    what += f" at {format_size(size)}" if size is not None else " (whole series)"
    prints = list(dict.fromkeys(p.fingerprint for p in found))
    total_sizes = int(rows["size_bytes"].nunique())
    colours = {fp: f"C{i % 10}" for i, fp in enumerate(prints)}
    fig = Figure(figsize=(max(6.0, 0.35 * len(found) + 3), 4.2))
    ax = fig.add_subplot()
    for fp in prints:
        mine = [(i, p) for i, p in enumerate(found) if p.fingerprint == fp]
        for complete in (True, False):
            part = [(i, p) for i, p in mine if p.complete == complete]
            if not part:
                continue
            ax.errorbar(
                [i for i, _ in part],
                [p.value for _, p in part],
                yerr=[[p.value - p.low for _, p in part], [p.high - p.value for _, p in part]],
                fmt="o",
                color=colours[fp],
                markerfacecolor=colours[fp] if complete else "white",  # hollow: an incomplete run
                markeredgewidth=1.5,
                capsize=3,
                label=f"fingerprint {fp or '?'} ({len(mine)} runs)" if complete or len(part) == len(mine) else None,
            )
    bands = [b for fp in prints if (b := run_to_run_band(found, fp)) is not None]
    for band in bands:
        ax.fill_between(
            [band.first - 0.45, band.last + 0.45],
            band.low,
            band.high,
            color=colours[band.fingerprint],
            alpha=0.15,
            linewidth=0,
            zorder=0,
            label=f"run-to-run band of {band.fingerprint or '?'}: {band.text} ({band.runs} runs)",
        )
        ax.hlines(band.centre, band.first - 0.45, band.last + 0.45, color=colours[band.fingerprint], alpha=0.4, lw=1)
    incomplete = [p for p in found if not p.complete]
    if incomplete:
        ax.plot([], [], "o", color="0.4", markerfacecolor="white", label=f"hollow: incomplete run ({len(incomplete)})")
    changes = [i for i in range(1, len(found)) if found[i].fingerprint != found[i - 1].fingerprint]
    for i in changes:
        ax.axvline(i - 0.5, color="0.35", linestyle="--", linewidth=1)
        ax.annotate(
            "fingerprint changed",
            (i - 0.5, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize=8,
            color="0.3",
        )
    ax.set_xticks(range(len(found)))
    ax.set_xticklabels([_tick(p, size is None and not p.complete, total_sizes) for p in found], rotation=60, fontsize=7)
    for label, p in zip(ax.get_xticklabels(), found):
        if not p.complete:
            label.set_color("firebrick")
    ax.set_xlim(-0.6, len(found) - 0.4)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("run (start time UTC, run id), oldest first")
    ax.set_title(what)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    banded = "; ".join(
        f"{b.fingerprint or '?'} band {b.text} around its median (a run outside it counts as a change)" for b in bands
    )
    caption = (
        f"{what}: {len(found)} runs, {len(prints)} fingerprint{'s' if len(prints) > 1 else ''}"
        f"{f'; {banded}' if banded else ''}"
        f"{f', {len(changes)} change' + ('s' if len(changes) > 1 else '') + ' marked' if changes else ''}"
        f"{f'; {len(incomplete)} incomplete (hollow, red label)' if incomplete else ''}."
    )
    return Chart(name=name, kind="trend", figure=fig, caption=caption)


@dataclass(frozen=True)
class Band:
    """What counts as a change for one fingerprint's runs: the 95% t prediction interval of one more
    run around their median, from their robust run-to-run spread (as the history gate measures it)."""

    fingerprint: str
    first: int
    last: int
    centre: float
    low: float
    high: float
    runs: int

    @property
    def text(self) -> str:
        """'+66%/-40%': the band is symmetric in log time, so not in percent."""
        return f"+{self.high / self.centre - 1:.0%}/-{1 - self.low / self.centre:.0%}"


def run_to_run_band(found: list[Point], fingerprint: str) -> Band | None:
    """The band of a fingerprint's complete runs on the chart; None with fewer than 3 of them."""
    from commbench.analysis.resolution import critical, history_noise

    mine = [(i, p) for i, p in enumerate(found) if p.fingerprint == fingerprint and p.complete and p.value > 0]
    if len(mine) < 3:
        return None
    logs = [math.log(p.value) for _, p in mine]
    noise = history_noise(logs, (0.0, 0))
    half = critical(0.05, 1, noise.df) * noise.scale(1)
    centre = math.exp(statistics.median(logs))
    return Band(
        fingerprint, mine[0][0], mine[-1][0], centre, centre * math.exp(-half), centre * math.exp(half), len(mine)
    )


def _tick(point: Point, show_sizes: bool, total: int) -> str:
    """A run's tick: start time and id; an incomplete run says so (and, for a whole-series index,
    how many of the sizes its point rests on)."""
    text = f"{point.started_at[5:16].replace('T', ' ')}\n{point.run_id[:6]}"
    if not point.complete:
        text += f"\n{point.status}" + (f" {point.sizes}/{total} sizes" if show_sizes else "")
    return text
