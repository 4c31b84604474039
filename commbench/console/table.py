"""The nccl-tests-like table rank 0 prints as the sweep goes.

Rows print as they are measured, so column widths are settled before the first row of each op:
the text columns fit the names the op will print (its name, variants, phases, dtypes); the
numeric columns are as wide as their values get in practice (sizes such as 1023.5M, times up
to ten million µs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from commbench.units import format_size


@dataclass(frozen=True)
class Column:
    """One column: its title, the unit printed under it, how a row fills it, and its width."""

    title: str
    cell: Callable[[dict[str, Any]], str]
    width: int = 0  # at least the title's width
    unit: str = ""
    left: bool = False  # text left-aligned, numbers right-aligned

    def fit(self, values: Iterable[str]) -> Column:
        """This column, as wide as its title, its unit and the given values."""
        width = max([len(self.title), len(self.unit), self.width, *map(len, values)])
        return Column(self.title, self.cell, width, self.unit, self.left)

    def render(self, text: str) -> str:
        return f"{text:<{self.width}}" if self.left else f"{text:>{self.width}}"


def _text(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda row: str(row[key])


def _number(key: str, spec: str) -> Callable[[dict[str, Any]], str]:
    """A number cell; '-' where the row has none (a barrier moves no bytes: no bandwidth)."""
    return lambda row: "-" if row[key] is None or row[key] != row[key] else format(row[key], spec)


NOISY_MARK = "noisy"
# The headline is results.stats.HEADLINE (the mean); the console sits beside results, not above it,
# so it names the columns itself (tests/console/test_table.py holds the two to one name).


def _half_width(row: dict[str, Any]) -> str:
    """Half the headline's 95% interval, as a percentage of the headline."""
    value, lo, hi = row["time_us_mean"], row["time_us_mean_lo"], row["time_us_mean_hi"]
    return f"{(hi - lo) / 2 / value:.1%}" if value and value > 0 else "-"


TEXT_COLUMNS = ("op", "variant", "phase", "dtype")
COLUMNS = (
    *(Column(key, _text(key), left=True) for key in TEXT_COLUMNS),
    Column("size", lambda row: format_size(row["size_bytes"]), width=9),
    Column("count", _text("count"), width=10),
    Column("mean", _number("time_us_mean", ".1f"), width=10, unit="(µs)"),
    Column("±", lambda row: _half_width(row), width=6, unit="(95%)"),
    Column("p50", _number("time_us_p50", ".1f"), width=10, unit="(µs)"),
    Column("p95", _number("time_us_p95", ".1f"), width=10, unit="(µs)"),
    Column("algbw", _number("algbw_gbps", ".3f"), width=8, unit="(GB/s)"),
    Column("busbw", _number("busbw_gbps", ".3f"), width=8, unit="(GB/s)"),
    Column("#wrong", lambda row: "skip" if row["wrong"] < 0 else str(row["wrong"])),
    Column("iters", _text("iters"), width=6),
    Column("", lambda row: NOISY_MARK if NOISY_MARK in row["note"] else "", left=True),
)


@dataclass(frozen=True)
class Table:
    """The columns of one op's section, fitted to what it will print."""

    columns: tuple[Column, ...]

    @classmethod
    def fitted(cls, names: dict[str, Iterable[str]]) -> Table:
        """Columns whose text columns fit names[column] (e.g. {"variant": op.variants})."""
        return cls(tuple(c.fit(names.get(c.title, ())) for c in COLUMNS))

    def header(self, title: str) -> str:
        titles = " ".join(c.render(c.title) for c in self.columns)
        units = " ".join(c.render(c.unit) for c in self.columns)
        return (
            f"# {title}\n# {titles.rstrip()}\n# {units.rstrip()}\n"
            f"# ±: half-width of the mean's 95% interval; {NOISY_MARK}: the interval is wide or the rounds disagree"
        )

    def line(self, row: dict[str, Any]) -> str:
        if row["status"] == "unavailable":
            op, variant = self.columns[0], self.columns[1]
            return f"  {op.render(row['op'])} {variant.render(row['variant'])} unavailable: {row['note']}"
        return ("  " + " ".join(c.render(c.cell(row)) for c in self.columns)).rstrip()
