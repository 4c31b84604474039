"""What a run's noisy rows amount to: how many, the likely reason, and the one option that helps,
with what it would cost. Printed as the last line of a sweep and in the report's summary.

A row is noisy when its headline's (its mean's) interval is wide or its rounds disagree (results/stats.py). Both
shrink with more samples per row: the interval as 1/sqrt(n), and longer blocks average a busy
machine's slow spells instead of landing in one. The option that adds samples is --time-per-size
for the rows the budget sizes, --min-iters for the rows that already sit at that floor (large,
slow cases), and --iters when the count was fixed. Its cost is estimated from the run itself: the
extra samples each row would get (the budget over its fastest sample, as the sweep plans them),
each costing its mean time plus an untimed barrier (taken as the cheapest sample of the run),
scaled by the run's own wall time per such second (warm-up, checks and exchanges included).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from commbench.results.budget import Budget
from commbench.results.stats import HEADLINE, HEADLINE_HI, HEADLINE_LO, NOISY_ROUNDS, NOISY_WIDTH
from commbench.units import counted

NOISY = "noisy"
# The most a recommendation multiplies the samples by: beyond it the run gets long and a busy
# machine's drift, which more samples do not remove, dominates what is left.
MAX_SAMPLE_FACTOR = 10.0
# Budgets offered, so the advice reads as a choice a person would make (0.05, not 0.0437).
NICE_BUDGETS_S = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
# A host is busy when processes outside this run keep this share of its cores running.
BUSY_SHARE = 0.25
# Without a measured wall time (a report), a second of samples and their barriers costs about this
# much wall time: on the shared 2-core machine, default sweeps took 2.1 to 2.4 (docs/measurement.md).
DEFAULT_WALL_PER_TIMED = 2.0


@dataclass(frozen=True)
class HostLoad:
    """The host's 1-minute load average, its cores, and how many of this run's ranks ran on it."""

    load: float
    cores: int
    own_ranks: int

    @classmethod
    def here(cls, own_ranks: int) -> HostLoad | None:
        try:
            return cls(os.getloadavg()[0], os.cpu_count() or 1, own_ranks)
        except OSError:  # not every platform has a load average
            return None

    @property
    def busy(self) -> bool:
        return self.load - self.own_ranks >= max(0.5, BUSY_SHARE * self.cores)


# Every column summarise_noise reads of a row: a caller holding a frame passes records of these
# alone (a frame's records of all its columns cost more than the summary).
NOISE_COLUMNS = (
    "status",
    "note",
    "iters",
    "time_us_min",
    "time_us_mean",
    HEADLINE_LO,
    HEADLINE_HI,
)


def _is_noisy(row: Mapping[str, Any]) -> bool:
    return NOISY in str(row.get("note") or "")


def _width(row: Mapping[str, Any]) -> float:
    value, lo, hi = (float(row.get(k) or math.nan) for k in (HEADLINE, HEADLINE_LO, HEADLINE_HI))
    return (hi - lo) / value if value > 0 else math.nan


def _seconds(row: Mapping[str, Any], column: str) -> float:
    value = row.get(column)
    try:
        return float(value) * 1e-6 if value is not None and value == value else math.nan
    except (TypeError, ValueError):
        return math.nan


def _sample_s(row: Mapping[str, Any]) -> float:
    """Seconds a sample of the row costs on average (its mean time per op)."""
    return _seconds(row, "time_us_mean")


def _planned(row: Mapping[str, Any], budget: Budget, time_per_size: float) -> float:
    """Samples the sweep would run for the row's case under another budget: the budget over its
    fastest sample (the sweep plans from the fastest warm-up sample), within the bounds."""
    fastest = _seconds(row, "time_us_min")
    if not fastest > 0:
        fastest = _sample_s(row)
    return replace(budget, time_per_size=time_per_size).filling(fastest)


def _nice(budget_s: float) -> float:
    return next((b for b in NICE_BUDGETS_S if b >= budget_s * 0.999), NICE_BUDGETS_S[-1])


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s" if seconds >= 0.05 else "under 0.1 s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class NoiseSummary:
    """The noisy rows of a run and the advice about them; line() is what is printed."""

    noisy: int
    measured: int
    reason: str
    option: str
    cost: str

    def line(self) -> str:
        return (
            f"# {self.noisy} of {self.measured} rows are {NOISY} (mean interval wider than {NOISY_WIDTH:.0%} "
            f"or rounds {NOISY_ROUNDS}x apart); likely reason: {self.reason}; what helps: {self.option} ({self.cost})"
        )


def summarise_noise(
    rows: Iterable[Mapping[str, Any]],
    budget: Budget,
    wall_s: float | None = None,
    host: HostLoad | None = None,
) -> NoiseSummary | None:
    """The summary of a run's measured rows, or None when none is noisy.

    wall_s: the run's measuring wall time (None in a report: a default ratio estimates it);
    host: the load where rank 0 ran (None when unknown).
    """
    measured = [r for r in rows if r.get("status") in ("ok", "wrong") and _sample_s(r) > 0]
    noisy = [r for r in measured if _is_noisy(r)]
    if not noisy:
        return None
    barrier_s = min((t for t in (_seconds(r, "time_us_min") for r in measured) if t > 0), default=0.0)
    work_s = sum(float(r.get("iters") or 0) * (_sample_s(r) + barrier_s) for r in measured)
    wall_per_work = wall_s / work_s if wall_s and work_s > 0 else DEFAULT_WALL_PER_TIMED
    run_s = wall_s if wall_s else work_s * wall_per_work
    widths = [w for w in map(_width, noisy) if math.isfinite(w)]
    width = statistics.median(widths) if widths else 2 * NOISY_WIDTH
    # Samples needed to bring the median noisy row's interval to the bound (1/sqrt(n)), within reason.
    wanted = min(MAX_SAMPLE_FACTOR, max(2.0, (width / NOISY_WIDTH) ** 2))
    option, extra_samples = _option(measured, noisy, budget, wanted)
    extra_s = sum(n * (_sample_s(r) + barrier_s) for r, n in extra_samples) * wall_per_work
    cost = f"about {_duration(run_s + extra_s)} instead of {_duration(run_s)}"
    return NoiseSummary(len(noisy), len(measured), _reason(noisy, width, host), option, cost)


def _at_floor(row: Mapping[str, Any], budget: Budget) -> bool:
    """The row's count was set by --min-iters, not by the budget (its case is slow)."""
    return float(row.get("iters") or 0) <= budget.min_iters


def _option(
    measured: list[Mapping[str, Any]], noisy: list[Mapping[str, Any]], budget: Budget, wanted: float
) -> tuple[str, list[tuple[Mapping[str, Any], float]]]:
    """The one option that adds samples where the noisy rows need them, and the extra samples it
    gives each row."""
    if budget.iters is not None:
        iters = math.ceil(budget.iters * wanted)
        return f"--iters {iters}", [(r, max(0.0, iters - float(r.get("iters") or 0))) for r in measured]
    floor = sum(_at_floor(r, budget) for r in noisy)
    if floor > len(noisy) / 2:
        min_iters = min(budget.max_iters, math.ceil(budget.min_iters * wanted))
        extra = [(r, max(0.0, min_iters - float(r.get("iters") or 0))) for r in measured if _at_floor(r, budget)]
        return f"--min-iters {min_iters}", extra
    time_per_size = _nice(budget.time_per_size * wanted)
    extra = [(r, max(0.0, _planned(r, budget, time_per_size) - float(r.get("iters") or 0))) for r in measured]
    return f"--time-per-size {time_per_size:g}", extra


def _reason(noisy: list[Mapping[str, Any]], width: float, host: HostLoad | None) -> str:
    """The likeliest reason: a busy host, the machine's speed changing between rounds, or too few
    samples for the spread the machine has."""
    if host is not None and host.busy:
        others = host.load - host.own_ranks
        return (
            f"other processes keep this host busy (load average {host.load:.1f} on {host.cores} cores, "
            f"about {others:.1f} beyond this run's {counted(host.own_ranks, 'rank')})"
        )
    drifting = sum("rounds" in str(r.get("note") or "") for r in noisy)
    if drifting > len(noisy) / 2:
        return f"the machine's speed changed between rounds ({drifting} of them have rounds that disagree)"
    iters = statistics.median(float(r.get("iters") or 0) for r in noisy)
    return f"too few samples for the machine's spread (median {iters:.0f} per row, intervals {width:.0%} wide)"
