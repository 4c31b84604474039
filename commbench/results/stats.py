"""Statistics over per-iteration times (each already the max over ranks), and the tests that say
whether two sets of them differ."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from fractions import Fraction


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * p / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


CONFIDENCE = 0.95
# A row is noisy when its headline's interval is wider than this fraction of it, or when its rounds'
# headlines disagree by more than this factor (max / min). Chosen on a shared 2-core machine, where a
# steady row's interval is a few percent wide and its rounds agree within ~10%: docs/measurement.md.
NOISY_WIDTH = 0.10
NOISY_ROUNDS = 1.25


def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the order statistics bounding the median with at least `confidence`.

    Distribution-free: the number of samples below the true median is Binomial(n, 1/2), so
    [x(j), x(n-j+1)] (1-based) covers it with probability 1 - 2 P(B <= j-1); j is the largest rank that
    keeps that at or above `confidence`. Exact integer arithmetic. Below 6 samples no pair reaches 95%:
    the interval is then the whole range (min, max), the most that can be said.
    """
    if n < 1:
        raise ValueError("an interval of no samples")
    # P(B <= k) = sum(comb(n, i) for i <= k) / 2^n, compared as integers: no float overflow at any n.
    tail = Fraction((1.0 - confidence) / 2).limit_denominator(10**6)
    bound = tail.numerator << n
    j, cumulative, term = 0, 0, 1  # term = comb(n, j)
    while j < n // 2:
        cumulative += term
        if cumulative * tail.denominator > bound:  # P(B <= j) > tail: rank j + 1 would lose coverage
            break
        j += 1
        term = term * (n - j + 1) // j
    j = max(j, 1)
    return j - 1, n - j


def median_ci(sorted_values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The distribution-free confidence interval of the median of sorted samples (see median_ci_ranks)."""
    lo, hi = median_ci_ranks(len(sorted_values), confidence)
    return sorted_values[lo], sorted_values[hi]


def quantile_t975(df: int) -> float:
    """Student's t quantile at 0.975 (a two-sided 95% interval): exact at 1 and 2 degrees of freedom,
    else the Cornish-Fisher expansion to 1/df^4 (within 0.13% of scipy's at 3, 1e-5 from 8 on), so
    that a rank writing rows never imports scipy."""
    if df < 1:
        raise ValueError("a t quantile of no degrees of freedom")
    if df == 1:
        return math.tan(math.pi * 0.475)
    if df == 2:
        return 0.95 / math.sqrt(2 * 0.975 * 0.025)
    z = Z95
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(term / df**power for power, term in enumerate(terms, 1))


def mean_ci(sorted_values: Sequence[float], mean: float, std: float) -> tuple[float, float]:
    """The 95% interval of the mean of sorted samples: Student's t, mean +/- t(0.975, n-1) std/sqrt(n),
    clipped to the samples' range (no mean lies outside it; a time's interval stays above 0). With one
    sample the interval is that sample."""
    n = len(sorted_values)
    if n < 2:
        return sorted_values[0], sorted_values[-1]
    half = quantile_t975(n - 1) * std / math.sqrt(n)
    return max(mean - half, sorted_values[0]), min(mean + half, sorted_values[-1])


def relative_width(value: float, lo: float, hi: float) -> float:
    """Width of an interval as a fraction of its value (0.04: the value is known to within 4%)."""
    return (hi - lo) / value if value > 0 else math.inf


def round_spread(round_values: Sequence[float]) -> float:
    """max / min of the rounds' values; 1.0 with fewer than two rounds (nothing to disagree)."""
    if len(round_values) < 2 or min(round_values) <= 0:
        return 1.0
    return max(round_values) / min(round_values)


# Two modes are told apart where consecutive sorted samples jump by this factor or more, with at
# least MODE_SHARE of the samples on each side (a shared machine's slow iterations form a second
# mode: docs/measurement.md). 2x, not less: rounds that drift 1.5x apart are drift, not two modes,
# and a headline that dropped the slower round would hide a slowdown from compare's series test.
MODE_GAP = 2.0
MODE_SHARE = 0.10
MODE_MIN = 3  # samples each mode holds at least: among a few samples a jump is no mode


def split_modes(samples_us: Sequence[float]) -> tuple[list[float], list[float]]:
    """(fast, slow) samples, sorted: split at the largest jump between consecutive samples when it
    reaches MODE_GAP with MODE_SHARE of them on each side, else (all of them, [])."""
    s = sorted(samples_us)
    keep = max(MODE_MIN, math.ceil(MODE_SHARE * len(s)))
    best, at = 1.0, 0
    for i in range(keep, len(s) - keep + 1):
        if s[i - 1] > 0 and s[i] / s[i - 1] > best:
            best, at = s[i] / s[i - 1], i
    return (s[:at], s[at:]) if best >= MODE_GAP else (s, [])


def lower_mode(samples_us: Sequence[float]) -> float:
    """The median of the fast mode (split_modes): the median itself where there is one mode. A
    candidate headline bench/repeatability.py weighs; not the row's (docs/measurement.md)."""
    return percentile(split_modes(samples_us)[0], 50)


def modes_note(samples_us: Sequence[float]) -> str | None:
    """What a row's note says when its samples form two modes: how many iterations the slow one
    holds and from where (the p50 lies in whichever mode holds the majority)."""
    fast, slow = split_modes(samples_us)
    if not slow:
        return None
    return f"two modes: {len(slow)} of {len(fast) + len(slow)} iterations slow, from {slow[0]:.4g} us"


# The row's headline: the mean of its per-iteration times (each the max over ranks), with the 95%
# interval of that mean and the mean of each round. It is what nccl-tests and PARAM comms report, what
# a job pays over many steps (n iterations cost n x the mean, slow ones included), and of the
# candidates weighed it repeated best across runs, as well as PARAM's loop or better on every op
# (docs/measurement.md). Every "the row's time" (the printed table, the bandwidths, charts,
# compare's default metric) reads these names; the p50, p95 and max stay beside it.
HEADLINE = "time_us_mean"
HEADLINE_LO = "time_us_mean_lo"
HEADLINE_HI = "time_us_mean_hi"
HEADLINE_ROUNDS = "time_us_mean_rounds"

# The statistic a replay reports of each call and of its step, and the one the latency-bandwidth
# model is fitted on, so that a projection (replay --project, model --predict-n) is a figure of the
# kind a replay measures: the p50 with its distribution-free 95% interval. The p50, not the headline
# mean: on a shared host a few slow iterations (a second mode, docs/measurement.md) lift a mean by
# tens of percent at sizes alike and unlike, which no line in S describes (the fit is then refused),
# while the p50 stays in the mode most iterations ran in. The replay and the model read these names
# alone: changing them changes both together.
TYPICAL = "time_us_p50"
TYPICAL_LO = "time_us_p50_lo"
TYPICAL_HI = "time_us_p50_hi"
TYPICAL_NAME = "p50"


@dataclass(frozen=True)
class Stats:
    """Summary of timing samples in microseconds; field names are the CSV column names."""

    time_us_min: float
    time_us_p50: float
    time_us_p50_lo: float
    time_us_p50_hi: float
    time_us_mean: float
    time_us_mean_lo: float
    time_us_mean_hi: float
    time_us_p95: float
    time_us_max: float
    time_us_std: float

    @classmethod
    def from_samples(cls, samples_us: Sequence[float]) -> Stats:
        """The row's statistics over every iteration: its mean (the headline) and its p50 each with
        a 95% interval. Where they form two modes the row's note says so (modes_note): the median is
        then in whichever mode holds the majority, and the mean weighs both."""
        s = sorted(samples_us)
        lo, hi = median_ci(s)
        mean = statistics.fmean(s)
        std = statistics.stdev(s) if len(s) > 1 else 0.0
        mean_lo, mean_hi = mean_ci(s, mean, std)
        return cls(
            time_us_min=s[0],
            time_us_p50=percentile(s, 50),
            time_us_p50_lo=lo,
            time_us_p50_hi=hi,
            time_us_mean=mean,
            time_us_mean_lo=mean_lo,
            time_us_mean_hi=mean_hi,
            time_us_p95=percentile(s, 95),
            time_us_max=s[-1],
            time_us_std=std,
        )

    @property
    def headline(self) -> float:
        return self.time_us_mean

    @property
    def relative_width(self) -> float:
        """The headline's interval as a fraction of it."""
        return relative_width(self.time_us_mean, self.time_us_mean_lo, self.time_us_mean_hi)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def noisy(stats: Stats, round_means: Sequence[float]) -> str | None:
    """Why a row's headline (its mean) cannot be trusted to the precision it prints, or None when it can."""
    reasons = []
    if stats.relative_width > NOISY_WIDTH:
        reasons.append(f"mean interval {stats.relative_width:.0%} wide")
    if (spread := round_spread(round_means)) > NOISY_ROUNDS:
        reasons.append(f"rounds' means differ {spread:.2f}x")
    return f"noisy: {', '.join(reasons)}" if reasons else None


STAT_COLUMNS = tuple(f.name for f in fields(Stats))


def bandwidth_gbps(size_bytes: int, time_us: float, bus_factor: float | None) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes), nccl-tests' definitions: algbw = S/t, busbw = algbw*factor.

    Both are NaN (empty CSV cells) for a latency-only op (bus_factor None, a barrier) and a zero time.
    """
    if bus_factor is None or time_us <= 0:
        return math.nan, math.nan
    algbw = size_bytes / (time_us * 1e-6) / 1e9
    return algbw, algbw * bus_factor


def overlap_fraction(comm_us: float, compute_us: float, overlapped_us: float) -> float:
    """The share of the shorter of the two that was hidden behind the longer, in [0, 1]; NaN if unknown.

    overlap = (comm + compute - overlapped) / min(comm, compute), clipped: 1 is perfect hiding
    (overlapped = max(comm, compute)), 0 none (overlapped = comm + compute). --overlap's rows
    (commbench/run/overlap.py measures the three times; docs/overlap.md says how to read it).
    """
    shorter = min(comm_us, compute_us)
    if not shorter > 0 or any(map(math.isnan, (comm_us, compute_us, overlapped_us))):
        return math.nan
    return min(1.0, max(0.0, (comm_us + compute_us - overlapped_us) / shorter))


# Standard error of a median relative to that of a mean, for roughly normal samples: sqrt(pi/2).
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test that a and b come from one distribution.

    scipy picks the exact distribution for small samples without ties and the tie-corrected
    normal approximation otherwise.
    """
    if not a or not b:
        return 1.0
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def spread_p(
    baseline: tuple[float, float, float], candidate: tuple[float, float, float], se_factor: float = MEDIAN_SE_FACTOR
) -> float:
    """Two-sided p-value that two times differ, from each run's (time, std, iterations): a mean's
    standard error std/sqrt(n) times se_factor (a median's by default, sqrt(pi/2); 1 for a mean)."""
    se2 = sum((se_factor * std) ** 2 / max(iters, 1) for _value, std, iters in (baseline, candidate))
    diff = abs(candidate[0] - baseline[0])
    if not se2 > 0:  # a single iteration, or an std of 0: no spread to judge by
        return 0.0 if diff > 0 else 1.0
    return math.erfc(diff / math.sqrt(se2) / math.sqrt(2))


Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval


def rounds_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value that two runs' per-round p50s differ: Welch's t-test on their logarithms.

    Each round is an independent replicate of the whole measurement, taken minutes or seconds
    apart, so their spread includes the machine's drift that the samples within one run hide.
    Logarithms: a slowdown is a factor, and the rounds' spread scales with the time.
    """
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    if min(la) == max(la) and min(lb) == max(lb):  # no spread in either: nothing to judge a difference by
        return 0.0 if la[0] != lb[0] else 1.0
    return welch_p(la, lb)


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p of Welch's t-test (scipy's ttest_ind(a, b, equal_var=False)), written out: a
    comparison runs it once per row, and scipy's wrapper costs a millisecond a call. Each side needs
    two values or more, and one of them a spread (rounds_p checks both)."""
    from scipy.special import stdtr

    ma, mb = statistics.fmean(a), statistics.fmean(b)
    # Floats, as scipy's: statistics.variance's exact fractions cost more than the whole test.
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    t = (ma - mb) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return float(2 * stdtr(df, -abs(t)))


def shift_p(log_ratios: Sequence[float]) -> float:
    """Two-sided p-value that a series of log ratios (candidate over baseline, one per size) is
    centred away from zero: a one-sample t-test. A real change moves most sizes the same way, while
    the noise between two runs moves them every which way."""
    if statistics.pvariance(log_ratios) == 0:
        return 0.0 if statistics.fmean(log_ratios) != 0 else 1.0
    from scipy.stats import ttest_1samp

    return float(ttest_1samp(log_ratios, 0.0).pvalue)


def interval_p(baseline: tuple[float, float, float], candidate: tuple[float, float, float]) -> float:
    """Two-sided p-value that two p50s differ, from each run's (p50, lo, hi) 95% interval.

    The interval's half-width on a log scale over 1.96 is taken as the standard error of the log p50.
    """
    se2 = sum(((math.log(hi) - math.log(lo)) / (2 * Z95)) ** 2 for _p50, lo, hi in (baseline, candidate))
    diff = abs(math.log(candidate[0]) - math.log(baseline[0]))
    if not se2 > 0:
        return 0.0 if diff > 0 else 1.0
    return math.erfc(diff / math.sqrt(se2) / math.sqrt(2))


# 1.4826 x the median absolute deviation estimates the standard deviation of normal noise, and one
# outlier cannot inflate it (the median's breakdown point is 50%).
MAD_TO_SIGMA = 1.4826


def mad(values: Sequence[float]) -> float:
    """The median absolute deviation of the values from their median."""
    centre = statistics.median(values)
    return statistics.median(abs(x - centre) for x in values)


def robust_sd(values: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation: a standard deviation that one disturbed value cannot inflate."""
    return MAD_TO_SIGMA * mad(values)


def pooled_robust_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """The robust spread of several groups pooled (1.4826 x the median absolute deviation of every
    value from its group's median), and its degrees of freedom."""
    deviations = [abs(x - statistics.median(g)) for g in groups if len(g) > 1 for x in g]
    df = sum(len(g) - 1 for g in groups if len(g) > 1)
    return (MAD_TO_SIGMA * statistics.median(deviations) if deviations else 0.0), df


def log_sd(values: Sequence[float]) -> float:
    """The standard deviation of the values' logarithms (0 with fewer than two)."""
    return statistics.stdev([math.log(x) for x in values]) if len(values) > 1 else 0.0


def normal_p(x: float, scale: float) -> float:
    """Two-sided p that x is a draw of normal noise of standard deviation `scale` around 0 (with no
    scale: 1 at 0, else 0)."""
    return (0.0 if x else 1.0) if scale == 0 else math.erfc(abs(x) / scale / math.sqrt(2))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: p-values whose family-wise error rate is at most the alpha
    they are compared with, however many rows a comparison holds."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for step, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - step) * p_values[i]))
        adjusted[i] = running
    return adjusted
