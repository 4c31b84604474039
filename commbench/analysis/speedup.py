"""Speedups with a 95% interval, and verdicts that refuse to call a winner inside the noise.

A speedup is the baseline variant's mean (the headline) over another variant's mean, both measured in one run at the
same workload; above 1 the variant is faster. Its interval comes from the **rounds**: a run visits
every case R times in rotation (docs/measurement.md), so round r of the baseline and round r of the
variant were measured moments apart, under the same load. The per-round ratios are therefore paired
replicates in which the machine's drift largely cancels, and their spread is what is left of it:
a Student t interval on their logarithms (log: a speedup is a factor) gives the uncertainty of the
pooled ratio. A bootstrap over the two rows' samples was not chosen: the samples of one row are not
independent (a slow spell of the machine spans many consecutive ones), so resampling them would
claim a precision that a second run does not reproduce, and they exist only with --raw.

Three rounds are few, and three ratios can agree by chance: the interval is never narrower than the
one the two rows' own intervals of the mean give (half-widths on a log scale, added in quadrature). With one
round that is the only source. A file without either (schema version 1) gives no interval.

The verdict: faster when the whole interval lies above 1x, slower when below, and "within noise"
when it holds 1x: then no winner is called.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from commbench.results.reader import ROUND_MEANS, ok_rows
from commbench.results.schema import key_without
from commbench.results.stats import HEADLINE, HEADLINE_HI, HEADLINE_LO, quantile_t975

FASTER, SLOWER, WITHIN_NOISE, NO_INTERVAL = "faster", "slower", "within noise", "no interval"


@dataclass(frozen=True)
class RowTimes:
    """What a speedup needs of one row: its headline (the pooled mean), its interval and each round's mean (µs)."""

    time: float
    lo: float = math.nan
    hi: float = math.nan
    rounds: tuple[float, ...] = ()

    @classmethod
    def of(cls, row: dict, suffix: str = "") -> RowTimes:
        """From a results row; `suffix` picks the columns of a joined copy (time_us_mean_baseline...)."""
        return cls(
            float(row[f"{HEADLINE}{suffix}"]),
            _number(row.get(f"{HEADLINE_LO}{suffix}")),
            _number(row.get(f"{HEADLINE_HI}{suffix}")),
            _rounds(row.get(f"{ROUND_MEANS}{suffix}")),
        )


def _number(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return number


def _rounds(value: object) -> tuple[float, ...]:
    """The reader's parsed rounds (results/reader.py); () where a frame not read from a CSV has none."""
    return value if isinstance(value, tuple) else ()


@dataclass(frozen=True)
class Speedup:
    """baseline mean / variant mean, with its 95% interval [lo, hi] and where the interval came from."""

    ratio: float
    lo: float
    hi: float
    method: str  # "rounds", "intervals" or "" (no interval)

    @classmethod
    def of_joined(cls, row: dict) -> Speedup:  # row: at least SPEEDUP_COLUMNS
        """From a row of a paired_speedups frame."""
        return cls(row["speedup"], row["speedup_lo"], row["speedup_hi"], row["interval_method"])

    @property
    def verdict(self) -> str:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)):
            return NO_INTERVAL
        if self.lo > 1.0:
            return FASTER
        if self.hi < 1.0:
            return SLOWER
        return WITHIN_NOISE


def _log_half_width(times: RowTimes) -> float:
    """Half the width of a row's interval on a log scale (NaN when the row has none)."""
    if not (times.lo > 0 and times.hi > 0):
        return math.nan
    return (math.log(times.hi) - math.log(times.lo)) / 2


def _stdev(values: list[float]) -> float:
    """The sample standard deviation in floats: statistics.stdev's exact fractions cost a third of a
    speedup chart's time at scale, for digits beyond any interval's."""
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def speedup_of(baseline: RowTimes, variant: RowTimes) -> Speedup:
    """The variant's speedup over the baseline with its interval (see the module's docstring)."""
    ratio = baseline.time / variant.time
    from_rows = math.hypot(_log_half_width(baseline), _log_half_width(variant))
    pairs = min(len(baseline.rounds), len(variant.rounds))
    from_rounds = math.nan
    if pairs >= 2:
        logs = [math.log(b / v) for b, v in zip(baseline.rounds[:pairs], variant.rounds[:pairs])]
        # The 95% t quantile without scipy: a chart worker would import it (0.7 s) for this alone.
        from_rounds = quantile_t975(pairs - 1) * _stdev(logs) / math.sqrt(pairs)
    candidates = [(h, m) for h, m in ((from_rounds, "rounds"), (from_rows, "intervals")) if math.isfinite(h)]
    if not candidates:
        return Speedup(ratio, math.nan, math.nan, "")
    half, method = max(candidates)
    return Speedup(ratio, ratio * math.exp(-half), ratio * math.exp(half), method)


# What of_joined reads of a paired_speedups row: the records are built of these alone, since one of
# every column cost a tenth of a report's time at 100,000 rows.
SPEEDUP_COLUMNS = ("speedup", "speedup_lo", "speedup_hi", "interval_method")

# The columns a speedup's two rows must share besides the workload: one run, one configuration.
SAME_RUN = ("backend", "run", *key_without("variant", "size_bytes"))
_TIME_COLUMNS = (HEADLINE, HEADLINE_LO, HEADLINE_HI, ROUND_MEANS)


def paired_speedups(rows: pd.DataFrame, baseline: str, workload: str = "size_bytes") -> pd.DataFrame:
    """Every measured non-baseline row joined to the baseline's row of the same run and workload,
    with speedup, speedup_lo, speedup_hi, verdict and interval_method; sorted by workload."""
    measured = ok_rows(rows).copy()
    for column in _TIME_COLUMNS:  # a frame not read from a CSV may lack the interval and the rounds
        if column not in measured.columns:
            measured[column] = math.nan
    same = [c for c in SAME_RUN if c in measured.columns] + [workload]
    base = measured[measured["variant"] == baseline][[*same, *_TIME_COLUMNS]]
    others = measured[measured["variant"] != baseline]
    joined = others.merge(base, on=same, suffixes=("", "_baseline"))
    results = [
        speedup_of(RowTimes.of(row, "_baseline"), RowTimes.of(row))
        for row in joined[[f"{c}{s}" for s in ("", "_baseline") for c in _TIME_COLUMNS]].to_dict("records")
    ]
    joined["speedup"] = [s.ratio for s in results]
    joined["speedup_lo"] = [s.lo for s in results]
    joined["speedup_hi"] = [s.hi for s in results]
    joined["verdict"] = [s.verdict for s in results]
    joined["interval_method"] = [s.method for s in results]
    return joined.sort_values(workload, kind="stable")


# Beyond these a ratio says only that it is tiny or huge: printed as <0.01x and >100x, never 1.3e-09x.
FACTOR_FLOOR, FACTOR_CEILING = 0.01, 100.0


def factor(value: float, digits: int = 2) -> str:
    """A ratio for people, to `digits` significant digits and never an exponent: 1.3x, 0.47x, 12x."""
    if not math.isfinite(value) or value <= 0:
        return "-"
    if value < FACTOR_FLOOR:
        return f"<{FACTOR_FLOOR:g}x"
    if value > FACTOR_CEILING:
        return f">{FACTOR_CEILING:g}x"
    text = f"{value:.0f}" if value >= 10 ** (digits - 1) else f"{value:.{digits}g}"
    if text == "1" and value != 1:  # 1.04 or 1.003 must not read as 1, the verdict's very boundary
        text = f"{value:.3g}" if f"{value:.3g}" != "1" else f"{value:.4f}".rstrip("0")
    return text + "x"


def span(lo: float, hi: float) -> str:
    """'1.3x-1.9x', or '<0.01x to >100x' where an end is beyond what a ratio can usefully say."""
    low, high = factor(lo), factor(hi)
    return f"{low} to {high}" if low[0] in "<>" or high[0] in "<>" else f"{low}-{high}"


def interval_text(speedup: Speedup) -> str:
    """'1.36x (1.1x-1.7x)', or the ratio alone when there is no interval."""
    if speedup.verdict == NO_INTERVAL:
        return factor(speedup.ratio, 3)
    return f"{factor(speedup.ratio, 3)} ({span(speedup.lo, speedup.hi)})"


def _where(values: Sequence[float], start: int, stop: int, name: str, fmt: Callable[[float], str]) -> str:
    """'at C=32', 'at C>=256', 'at C<=64', 'at C=64..256' or 'at every C' for values[start:stop]."""
    first, last = fmt(values[start]), fmt(values[stop - 1])
    if start == 0 and stop == len(values):
        return f"at every {name}" if len(values) > 1 else f"at {name}={first}"
    if stop - start == 1:
        return f"at {name}={first}"
    if start == 0:
        return f"at {name}<={last}"
    if stop == len(values):
        return f"at {name}>={first}"
    return f"at {name}={first}..{last}"


def _segment(speedups: Sequence[Speedup]) -> str:
    """What one run of points with the same verdict says, with the span of their intervals."""
    verdict = speedups[0].verdict
    lo, hi = min(s.lo for s in speedups), max(s.hi for s in speedups)
    if verdict == FASTER:
        return f"faster by {span(lo, hi)}"
    if verdict == SLOWER:
        return f"slower by {span(1 / hi, 1 / lo)}"
    if verdict == WITHIN_NOISE:
        return f"within noise ({span(lo, hi)})"
    ratios = [s.ratio for s in speedups]
    shown = factor(ratios[0], 3) if len(ratios) == 1 else f"{factor(min(ratios), 3)}-{factor(max(ratios), 3)}"
    return f"{shown} (no interval: the file has neither rounds nor intervals)"


def summarise(
    values: Sequence[float],
    speedups: Sequence[Speedup],
    name: str,
    fmt: Callable[[float], str],
    separator: str = "; ",
) -> str:
    """One variant's verdicts over its workloads (sorted), consecutive equal verdicts merged:
    'within noise (0.85x-1.2x) at C=32; faster by 1.3x-1.9x at C>=256'."""
    parts, start = [], 0
    for i in range(1, len(speedups) + 1):
        if i == len(speedups) or speedups[i].verdict != speedups[start].verdict:
            parts.append(f"{_segment(speedups[start:i])} {_where(values, start, i, name, fmt)}")
            start = i
    return separator.join(parts)


def variant_verdicts(
    joined: pd.DataFrame, variants: Sequence[str], workload: str, name: str, fmt: Callable[[float], str]
) -> list[tuple[str, str]]:
    """(variant, its summarised verdicts) for each variant of `variants` in a paired_speedups frame
    of one run configuration and phase."""
    lines = []
    for variant in variants:
        mine = joined[joined["variant"] == variant].sort_values(workload)
        if mine.empty:
            continue
        points = [Speedup.of_joined(row) for row in mine[list(SPEEDUP_COLUMNS)].to_dict("records")]
        lines.append((variant, summarise(list(mine[workload]), points, name, fmt)))
    return lines


def overall(rows: pd.DataFrame, baseline: str, workload: str, name: str, fmt: Callable[[float], str]) -> str:
    """One sentence for one run configuration and phase: which variant is fastest and by how much,
    over the workloads every variant measured.

    The candidate is the variant with the lowest geometric-mean headline (mean time) there. It is called fastest only
    when it beats the runner-up beyond the noise at every workload; otherwise the sentence says it
    has the lowest time and where the intervals leave the order open. Its speedup over the baseline
    follows, with intervals."""
    measured = ok_rows(rows)
    times = measured.pivot_table(index=workload, columns="variant", values=HEADLINE, aggfunc="median").dropna()
    if times.empty or baseline not in times.columns or len(times.columns) < 2:
        return ""
    common = measured[measured[workload].isin(times.index)]
    ranking = sorted(times.columns, key=lambda v: float(sum(math.log(t) for t in times[v])))
    winner, runner_up = ranking[0], ranking[1]

    def against(slow: str, fast: str) -> tuple[str, list[Speedup]]:
        """The fast variant's speedup over the slow one, summarised over the workloads."""
        joined = paired_speedups(common[common["variant"].isin([slow, fast])], slow, workload)
        points = [Speedup.of_joined(row) for row in joined[list(SPEEDUP_COLUMNS)].to_dict("records")]
        return summarise(list(joined[workload]), points, name, fmt, ", "), points

    def called(variant: str) -> str:
        return f"{variant} (the baseline)" if variant == baseline else variant

    versus, points = against(runner_up, winner)
    decided = all(p.verdict == FASTER for p in points)
    lead = f"{called(winner)} is fastest" if decided else f"no clear winner; lowest mean: {called(winner)}"
    text = f"{lead}; against the runner-up {called(runner_up)}: {versus}"
    if baseline not in (winner, runner_up):
        text += f"; against {baseline}: {against(baseline, winner)[0]}"
    return text
