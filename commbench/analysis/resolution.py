"""What a comparison could have seen: the smallest change it detects with 90% probability at its
own false-alarm rate, from the noise it measured (docs/history.md, "What the gate can see").

A test that calls a change when |x| / scale > t(1 - a/2, df) (a the false-alarm rate of one test:
alpha over the tests judged, Holm's first and hardest step) detects a true shift delta with
probability about P(T > t(1 - a/2, df) - delta / scale). That reaches POWER at

    delta_90 = (t(1 - a/2, df) + t(POWER, df)) * scale,   the resolution R = exp(delta_90)

(a ratio: 1.38x). Against a history, scale = s * sqrt(c/K + 1/n): s the run-to-run spread of the
series (robust, floored by the pooled spread, as the test takes it), n the history's runs, K the
candidate's launches pooled by their median (c = 1 for K <= 2, pi/2 from 3 on: a median's
variance against a mean's); the launches average their offsets out, the history's median keeps
its own uncertainty. A change below the threshold judged with R above 1 + threshold
is inconclusive, not passed: the comparison could not have seen a change of the threshold's size.
The launches a plan names (launches_for) assume the spread at its PLAN_CONFIDENCE upper bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from commbench.results.stats import MEDIAN_SE_FACTOR, robust_sd

POWER = 0.9
# A plan (the launches a change needs) is made from one history's estimate of each spread, and the
# histories it is then judged against measure their own: it plans at this one-sided upper confidence
# bound of the spread, so that the K it names keeps its power where the estimate fell low (4 in 5).
PLAN_CONFIDENCE = 0.8
# More launches than this are no plan: the history's own median, not the candidate, limits it.
MAX_LAUNCHES = 100


@dataclass(frozen=True)
class Noise:
    """The scale of one judged quantity (log units) for one candidate launch, and how the test sees it."""

    spread: float  # s: the run-to-run sd of one launch (log), or the test's own standard error pairwise
    df: float  # degrees of freedom of the t the test uses
    history_runs: int = 0  # n: the history's runs (0 pairwise: the spread is the whole standard error)
    own: float = 0.0  # the candidate's own spread added in quadrature (a row whose rounds disagree)

    def scale(self, launches: int = 1) -> float:
        """The standard error of the candidate's deviation with `launches` launches pooled (by their
        median: its variance is pi/2 times a mean's from 3 launches on, as for normal offsets)."""
        if self.history_runs == 0:
            return math.hypot(self.spread, self.own)
        pooled = (MEDIAN_SE_FACTOR**2 if launches >= 3 else 1.0) / launches
        return math.sqrt(self.spread**2 * (pooled + 1 / self.history_runs) + self.own**2 * pooled)


def critical(alpha: float, tests: int, df: float) -> float:
    """The |t| a change must pass: alpha over the tests (Holm's first step), two-sided."""
    return quantile_t(1 - alpha / max(tests, 1) / 2, max(df, 1e-9))


def quantile_t(p: float, df: float) -> float:
    """Student's t quantile: scipy's t.ppf, through its ufunc (the same numbers, without t.ppf's
    argument checks, which cost 40 us a call where compare asks twice per row)."""
    from scipy.special import stdtrit

    return float(stdtrit(df, p))


def resolution(noise: Noise, alpha: float, tests: int, launches: int = 1) -> float:
    """The smallest ratio (>= 1) detected with POWER probability; inf where the test has no spread to go by."""
    if noise.df <= 0 or not math.isfinite(noise.spread):
        return math.inf
    delta = (critical(alpha, tests, noise.df) + quantile_t(POWER, noise.df)) * noise.scale(launches)
    return math.exp(delta)


def detection_probability(
    log_shift: float, noise: Noise, alpha: float, tests: int, launches: int, threshold_log: float
) -> float:
    """The chance a true shift (log) is called: it must pass the test and exceed the threshold."""
    from scipy.stats import t

    scale = noise.scale(launches)
    if scale == 0 or noise.df <= 0:
        return 1.0 if abs(log_shift) > threshold_log else 0.0
    bar = max(critical(alpha, tests, noise.df) * scale, threshold_log)
    return float(t.sf((bar - abs(log_shift)) / scale, noise.df))


def planning_noise(noise: Noise, history_runs: int | None = None) -> Noise:
    """The noise a plan assumes: the spread at its PLAN_CONFIDENCE upper bound, s * sqrt(df / q) with q
    the chi-square quantile at 1 - PLAN_CONFIDENCE (a plan comes from one history's estimate of the
    spread, and the next history measures its own); `history_runs` plans against a history of that
    many runs instead (its spread then estimated from as many: df history_runs - 1)."""
    from scipy.special import chdtri

    if history_runs is not None and noise.history_runs:
        noise = replace(noise, history_runs=history_runs, df=float(history_runs - 1))
    if noise.df <= 0 or not math.isfinite(noise.spread):
        return noise
    bound = math.sqrt(noise.df / float(chdtri(noise.df, PLAN_CONFIDENCE)))
    return replace(noise, spread=noise.spread * bound, own=noise.own * bound)


def launches_for(ratio: float, noise: Noise, alpha: float, tests: int, history_runs: int | None = None) -> int | None:
    """The fewest candidate launches K that resolve `ratio` under the plan's noise (planning_noise:
    the spread at its upper bound, against `history_runs` runs when given); None when no K up to
    MAX_LAUNCHES does (the history is too short or too noisy: its own median then limits the gate)."""
    planned = planning_noise(noise, history_runs)
    for k in range(1, MAX_LAUNCHES + 1):
        if resolution(planned, alpha, tests, k) <= ratio:
            return k
    return None


def conclusive(resolved: float, threshold_ratio: float) -> bool:
    """True when the comparison resolves a change of the threshold's size."""
    return resolved <= threshold_ratio * (1 + 1e-9)


def history_noise(history: Sequence[float], floor: tuple[float, int], own: float = 0.0) -> Noise:
    """The spread the history gate's t prediction interval uses (pooled_p):
    the history's robust sd, floored by the pooled one with its degrees of freedom."""
    sd, df = robust_sd(history), len(history) - 1
    if floor[0] > sd:
        sd, df = floor
    return Noise(sd, df, len(history), own)


def format_ratio(ratio: float) -> str:
    return "nothing (no spread to judge by)" if not math.isfinite(ratio) else f"{ratio:.2f}x"


def pooled_p(value: float, history: Sequence[float], noise: Noise, launches: int = 1) -> float:
    """Two-sided p that `value` (the median of `launches` candidate launches) is what gave `history`:
    a t prediction interval (the history's spread and the candidate's own), the candidate's part of the
    variance divided by its launches (with one launch the same p)."""
    import statistics

    from scipy.stats import t

    diff = value - statistics.median(history)
    scale = noise.scale(launches)
    if scale == 0:
        return 0.0 if diff else 1.0
    return float(2 * t.sf(abs(diff) / scale, noise.df))
