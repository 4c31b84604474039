"""Which rows share a chart (a panel) and a line on it (a series), and the facts a chart's title
and caption state about them."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping

import pandas as pd

from commbench.results.reader import ok_rows

# What distinguishes two lines on one chart; the label shows only the parts that differ.
SERIES_COLUMNS = ("backend", "variant", "run", "world_size")
RUN_COLUMNS = ("backend", "run", "world_size")  # one run: a CSV's rows at one world size on one backend
_MAX_TICKS = 9


def chart_panels(frame: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """Groups of rows that share a chart: one per (op, phase), split by dtype and mode when mixed."""
    measured = frame[frame["phase"] != ""]  # unavailable rows have no phase; they go in captions
    split = [c for c in ("dtype", "mode") if measured[c].nunique() > 1]
    for key, group in measured.groupby(["op", "phase", *split], sort=True):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(map(str, key)))
        unavailable = frame[(frame["op"] == key[0]) & (frame["status"] == "unavailable")]
        yield name, pd.concat([group, unavailable])


def title_facts(group: pd.DataFrame) -> str:
    """World size, backend, dtype, mode and hosts of the rows on a chart, for its title. A latency-only
    op (a barrier) moves no data: no dtype is named for it."""

    def values(column: str) -> str:
        return ", ".join(sorted({str(v) for v in group[column].dropna().unique() if str(v)}))

    hosts = sorted({h for cell in group["hosts"].dropna().unique() for h in str(cell).split(";") if h})
    host_text = ", ".join(hosts[:3]) + (f" +{len(hosts) - 3} more" if len(hosts) > 3 else "")
    worlds = ", ".join(str(int(w)) for w in sorted(group["world_size"].dropna().unique()))
    dtype = "" if is_latency_only(group) else f" · {values('dtype')}"
    return f"n={worlds} ranks · {values('backend')}{dtype} · {values('mode')} · host {host_text or 'unknown'}"


def is_latency_only(group: pd.DataFrame) -> bool:
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


def chart_series(group: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """(label, rows sorted by size) per line; the label names the variant and whatever else differs."""
    varying = run_label_columns(group)
    for key, rows in group.groupby(list(SERIES_COLUMNS), sort=True):
        yield line_label(dict(zip(SERIES_COLUMNS, key)), varying), rows.sort_values("size_bytes")


def line_label(parts: Mapping[str, object], varying: list[str]) -> str:
    """A line's legend entry: its variant, then the run columns in `varying` (run_label_columns)."""
    extras = [f"n={int(parts[c])}" if c == "world_size" else str(parts[c]) for c in varying]
    return str(parts["variant"]) + (f" ({', '.join(extras)})" if extras else "")


def left_out_note(group: pd.DataFrame) -> str:
    """Which rows a chart does not show and why, so that nothing disappears silently."""
    notes = []
    wrong = group[group["status"] == "wrong"]
    if not wrong.empty:
        notes.append(f"{len(wrong)} row(s) with wrong results not plotted")
    for _, row in group[group["status"] == "unavailable"].drop_duplicates(["variant", "backend"]).iterrows():
        notes.append(f"{row['variant']} unavailable on {row['backend']}: {row['note']}")
    return ("; ".join(notes) + ".") if notes else ""
