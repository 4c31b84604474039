"""How an op's charts look: a variant family (its baseline and workload column), a colour per
variant, a line style, marker and hatch per run, and the order variants are drawn in."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from commbench.analysis.charts.grouping import RUN_COLUMNS
from commbench.units import format_size

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


# Colour encodes the variant (matplotlib's tab10, whose colours differ in lightness as well as hue);
# line style and marker encode the run, so no two lines of a chart look alike.
COLORS = tuple(f"C{i}" for i in range(10))
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")
HATCHES = ("", "//", "..", "xx", "\\\\", "++")
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


# A series of more points than this is drawn dense: its error bars as one band through the same
# ends (every point's interval is still drawn, as an edge of the band), and a marker on every
# n-th point only (the line still passes through every point). Hundreds of bars and markers per
# line cost seconds a chart and overlap into a smear that shows nothing more.
DENSE_POINTS = 64


def markevery(points: int) -> int:
    """Every how many points a line draws its marker: all of them, up to DENSE_POINTS."""
    return max(1, -(-points // DENSE_POINTS))


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
        runs = sorted(
            {(str(b), str(r), int(w)) for b, r, w in rows[list(RUN_COLUMNS)].drop_duplicates().itertuples(index=False)}
        )
        return cls(tuple(variants), tuple(runs), tuple(variants))

    def run_index(self, rows: pd.DataFrame) -> int:
        first = rows.iloc[0]
        return self.runs.index((str(first["backend"]), str(first["run"]), int(first["world_size"])))

    def color(self, variant: str) -> str:
        order = self.color_order or self.variants
        return COLORS[order.index(variant) % len(COLORS)] if variant in order else "gray"

    def style(self, rows: pd.DataFrame) -> dict[str, Any]:
        """Keyword arguments of Axes.plot for one series' rows (a dense series marks every n-th point:
        axes.markevery)."""
        run = self.run_index(rows)
        return {
            "color": self.color(str(rows["variant"].iloc[0])),
            "linestyle": LINESTYLES[run % len(LINESTYLES)],
            "marker": MARKERS[run % len(MARKERS)],
            "markevery": markevery(len(rows)),
        }

    def order(self, series: tuple[str, pd.DataFrame]) -> tuple[int, int]:
        """Sort key of a series: by variant, then by run."""
        rows = series[1]
        return (self.variants.index(str(rows["variant"].iloc[0])), self.run_index(rows))
