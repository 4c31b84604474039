"""What a report of several runs says first: the runs side by side, what differs between them
(fingerprint, hosts, versions, options) and their largest differences with intervals, each run
against the first one given."""

from __future__ import annotations

import math
import shlex

import pandas as pd

from commbench.analysis.compare import compare_frames
from commbench.errors import UserError
from commbench.results.reader import ok_rows
from commbench.results.schema import ROW_KEY
from commbench.results.stats import HEADLINE, HEADLINE_HI, HEADLINE_LO
from commbench.units import format_size

# What can differ between runs, as the summary names it.
FACTS = {
    "fingerprint": "fingerprint",
    "hosts": "hosts",
    "world_size": "ranks",
    "backend": "backend",
    "backend_version": "backend version",
    "torch_version": "torch",
    "commbench_version": "commbench",
    "api": "API",
    "mode": "mode",
    "dtype": "dtype",
}
STOPPED = "stopped after"  # the note of a case a run did not finish (docs/csv-schema.md)
LARGEST = 10  # rows in the table of largest differences


def run_order(frame: pd.DataFrame) -> list[str]:
    """The runs in the order given (files as passed, runs within a file as written)."""
    return list(dict.fromkeys(frame["run"]))


def run_colours(frame: pd.DataFrame) -> dict[str, str]:
    """One colour per run (matplotlib's tab10 by order), the same on every chart and in the tables."""
    return {run: f"C{i % 10}" for i, run in enumerate(run_order(frame))}


def is_multi_run(frame: pd.DataFrame) -> bool:
    return frame["run"].nunique() > 1


def run_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per run: when, how complete, where and with what it ran."""
    rows = []
    for run in run_order(frame):
        mine = frame[frame["run"] == run]
        first = mine.iloc[0]
        stamps = sorted(t for t in mine["timestamp"] if t)
        stopped = mine["note"].str.contains(STOPPED, regex=False).sum()
        rows.append(
            {
                "run": run,
                "started": stamps[0][:19].replace("T", " ") if stamps else "",
                "rows": len(ok_rows(mine)),
                "complete": f"incomplete: {stopped} case(s) stopped early" if stopped else "complete",
                "hosts": first["hosts"],
                "world_size": first["world_size"],
                "backend": first["backend"],
                "backend_version": first["backend_version"],
                "torch_version": first["torch_version"],
                "commbench_version": first["commbench_version"],
                "fingerprint": first["fingerprint"],
            }
        )
    return pd.DataFrame(rows)


def what_differs(frame: pd.DataFrame) -> list[str]:
    """One sentence per fact in which the runs differ, naming the runs with each value; then the
    command-line options that differ from the first run's, and the cases only some runs measured."""
    order = run_order(frame)
    runs = frame.groupby("run", sort=False)
    first = runs.first()
    sentences = []
    for column, name in FACTS.items():
        # Each run's distinct values, found by one grouping: _fact of them is _fact of every row.
        distinct = runs[column].unique()
        values = {run: _fact(distinct[run]) for run in order}
        if len(set(values.values())) > 1:
            by_value: dict[str, list[str]] = {}
            for run, value in values.items():
                by_value.setdefault(value or "(not recorded)", []).append(run)
            sentences.append(f"{name}: " + "; ".join(f"{v} in {', '.join(r)}" for v, r in by_value.items()))
    base_options = _options(str(first.loc[order[0], "command"]))
    for run in order[1:]:
        options = _options(str(first.loc[run, "command"]))
        changes = [
            f"{name} {base_options.get(name, '(unset)')} -> {options.get(name, '(unset)')}"
            for name in dict.fromkeys([*base_options, *options])
            if base_options.get(name) != options.get(name)
        ]
        if changes:
            sentences.append(f"options of {run} against {order[0]}: {'; '.join(changes)}")
    cases = {run: set(_cases(frame[frame["run"] == run])) for run in order}
    everywhere = set.intersection(*cases.values())
    for run in order:
        only = sorted(cases[run] - everywhere)
        if only:
            shown = ", ".join(only[:4]) + (f" (+{len(only) - 4} more)" if len(only) > 4 else "")
            sentences.append(f"measured by {run} and not by every run: {shown}")
    return sentences


def _fact(column) -> str:
    """A run's values of a fact (its column's values, any repeated), each once, sorted, as text."""
    values = sorted({str(int(v)) if isinstance(v, float) and v.is_integer() else str(v) for v in column if str(v)})
    return ", ".join(values)


def _options(command: str) -> dict[str, str]:
    """A command's options as name -> value ("" for a flag), leaving out where it wrote (-o)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    options: dict[str, str] = {}
    for i, word in enumerate(words):
        if not word.startswith("-"):
            continue
        name, eq, value = word.partition("=")
        if not eq:
            following = words[i + 1] if i + 1 < len(words) else ""
            value = following if following and not following.startswith("-") else ""
        if name not in ("-o", "--output"):
            options[name] = value
    return options


def _cases(rows: pd.DataFrame) -> list[str]:
    measured = ok_rows(rows)
    return [f"{op}/{variant}" for op, variant in measured[["op", "variant"]].drop_duplicates().itertuples(index=False)]


def largest_differences(frame: pd.DataFrame, top: int = LARGEST) -> tuple[pd.DataFrame, list[str]]:
    """The rows whose headline (mean) differs most (by ratio) between a run and the first run, with
    the ratio's 95% interval (from the two rows' intervals: candidate lo / baseline hi .. candidate hi /
    baseline lo) and compare's verdict; and a note per run that shares no row with the first."""
    order = run_order(frame)
    base = ok_rows(frame[frame["run"] == order[0]])
    found, notes = [], []
    for run in order[1:]:
        cand = ok_rows(frame[frame["run"] == run])
        try:
            verdicts = {d.key: d.verdict for d in compare_frames(base, cand, order[0], run).deltas}
        except UserError as exc:
            notes.append(f"{run}: {exc.format_message()}")
            continue
        both = base.merge(cand, on=list(ROW_KEY), suffixes=("_base", ""))
        for row in both.to_dict("records"):
            if not (row[f"{HEADLINE}_base"] > 0 and row[HEADLINE] > 0):
                continue
            ratio = row[HEADLINE] / row[f"{HEADLINE}_base"]
            lo = _divide(row[HEADLINE_LO], row[f"{HEADLINE_HI}_base"])
            hi = _divide(row[HEADLINE_HI], row[f"{HEADLINE_LO}_base"])
            key = tuple(int(row[c]) if c in ("size_bytes", "world_size") else row[c] for c in ROW_KEY)
            found.append(
                {
                    "run": run,
                    "case": f"{row['op']}/{row['variant']}/{row['phase']} {row['dtype']} at {format_size(int(row['size_bytes']))}",
                    "baseline_us": row[f"{HEADLINE}_base"],
                    HEADLINE: row[HEADLINE],
                    "ratio": ratio,
                    "interval": f"{lo:.2f}x .. {hi:.2f}x" if math.isfinite(lo) and math.isfinite(hi) else "",
                    "verdict": verdicts.get(key, ""),
                    "_order": abs(math.log(ratio)),
                }
            )
    if not found:
        return pd.DataFrame(), notes
    table = pd.DataFrame(found).sort_values("_order", ascending=False).head(top)
    return table.drop(columns="_order").reset_index(drop=True), notes


def _divide(a: float, b: float) -> float:
    try:
        return a / b if b > 0 else math.nan
    except TypeError:
        return math.nan
