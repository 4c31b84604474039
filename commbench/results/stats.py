"""Statistics over per-iteration times (each already the max over ranks), and the tests that say
whether two sets of them differ."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * p / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Stats:
    """Summary of timing samples in microseconds; field names are the CSV column names."""

    time_us_min: float
    time_us_p50: float
    time_us_mean: float
    time_us_p95: float
    time_us_max: float
    time_us_std: float

    @classmethod
    def from_samples(cls, samples_us: Sequence[float]) -> Stats:
        s = sorted(samples_us)
        return cls(
            time_us_min=s[0],
            time_us_p50=percentile(s, 50),
            time_us_mean=statistics.fmean(s),
            time_us_p95=percentile(s, 95),
            time_us_max=s[-1],
            time_us_std=statistics.stdev(s) if len(s) > 1 else 0.0,
        )

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


STAT_COLUMNS = tuple(f.name for f in fields(Stats))


def bandwidth_gbps(size_bytes: int, time_us: float, bus_factor: float | None) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes), nccl-tests' definitions: algbw = S/t, busbw = algbw*factor.

    Both are NaN (empty CSV cells) for a latency-only op (bus_factor None, a barrier) and a zero time.
    """
    if bus_factor is None or time_us <= 0:
        return math.nan, math.nan
    algbw = size_bytes / (time_us * 1e-6) / 1e9
    return algbw, algbw * bus_factor


# Standard error of a median relative to that of a mean, for roughly normal samples: sqrt(pi/2).
_MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test that a and b come from one distribution.

    scipy picks the exact distribution for small samples without ties and the tie-corrected
    normal approximation otherwise.
    """
    if not a or not b:
        return 1.0
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def spread_p(baseline: tuple[float, float, float], candidate: tuple[float, float, float]) -> float:
    """Two-sided p-value that two p50 times differ, from each run's (p50, std, iterations)."""
    se2 = sum((_MEDIAN_SE_FACTOR * std) ** 2 / max(iters, 1) for _p50, std, iters in (baseline, candidate))
    diff = abs(candidate[0] - baseline[0])
    if not se2 > 0:  # a single iteration, or an std of 0: no spread to judge by
        return 0.0 if diff > 0 else 1.0
    return math.erfc(diff / math.sqrt(se2) / math.sqrt(2))
