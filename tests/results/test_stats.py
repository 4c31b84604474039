"""Statistics and bandwidth from fixed numbers."""

from __future__ import annotations

import math
import random

import pytest

from commbench.results.stats import (
    NOISY_ROUNDS,
    NOISY_WIDTH,
    Stats,
    bandwidth_gbps,
    median_ci,
    noisy,
    percentile,
    quantile_t975,
    rounds_p,
)


def _coverage(n: int, j: int) -> float:
    """P(x(j) <= median <= x(n-j+1)) (1-based order statistics): 1 - 2 P(Binomial(n, 1/2) <= j-1)."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2**n


def _brute_force_ci(values: list[float]) -> tuple[float, float]:
    """The narrowest symmetric pair of order statistics whose coverage of the median is >= 95%,
    found by trying every pair; the whole range when none reaches it."""
    s, n = sorted(values), len(values)
    best = (s[0], s[-1])
    for j in range(1, n // 2 + 1):
        if _coverage(n, j) >= 0.95:
            best = (s[j - 1], s[n - j])
    return best


@pytest.mark.parametrize("n", [1, 2, 5, 6, 7, 9, 10, 17, 20, 33, 50, 100, 251, 1000])
def test_median_interval_equals_the_brute_force_reference(n: int) -> None:
    rng = random.Random(n)
    values = [rng.lognormvariate(0.0, 0.5) for _ in range(n)]
    assert median_ci(sorted(values)) == _brute_force_ci(values)


def test_median_interval_on_known_samples() -> None:
    # 1..20: B(20, 1/2) puts 2.07% below rank 6's threshold, so [x(6), x(15)] covers 95.9%.
    assert median_ci([float(i) for i in range(1, 21)]) == (6.0, 15.0)
    # The headline's (the mean's) interval: 10.5 +/- t(0.975, 19) x sd/sqrt(20), sd = sqrt(35).
    half = quantile_t975(19) * math.sqrt(35) / math.sqrt(20)
    assert Stats.from_samples([float(i) for i in range(1, 21)]).relative_width == pytest.approx(2 * half / 10.5)


def test_the_t_quantile_is_scipys() -> None:
    from scipy.special import stdtrit

    for df in (1, 2, 3, 4, 5, 8, 19, 30, 100, 10_000):
        assert quantile_t975(df) == pytest.approx(float(stdtrit(df, 0.975)), rel=1.5e-3 if df == 3 else 4e-4)


def test_the_mean_interval_is_students_t_clipped_to_the_samples() -> None:
    s = Stats.from_samples([10.0] * 9 + [100.0])  # one slow iteration: the mean weighs it
    assert s.time_us_mean == pytest.approx(19.0) and s.time_us_p50 == 10.0
    half = quantile_t975(9) * s.time_us_std / math.sqrt(10)
    assert s.time_us_mean_lo == 10.0  # 19 - 20.4 lies below every sample: clipped to the fastest
    assert s.time_us_mean_hi == pytest.approx(19.0 + half)
    one = Stats.from_samples([7.0])
    assert (one.time_us_mean_lo, one.time_us_mean_hi) == (7.0, 7.0)


def test_a_wide_interval_or_disagreeing_rounds_make_a_row_noisy() -> None:
    steady = Stats.from_samples([100.0 + (i % 5) * 0.5 for i in range(60)])
    assert noisy(steady, [101.0, 100.5, 101.2]) is None
    assert "rounds' means differ" in noisy(steady, [100.0, 100.0 * NOISY_ROUNDS * 1.1, 101.0])
    wide = Stats.from_samples([100.0 * (1 + NOISY_WIDTH * 10 * i / 60) for i in range(60)])
    assert "interval" in noisy(wide, [120.0])


def test_rounds_test_is_on_the_rounds_spread() -> None:
    assert rounds_p([100.0, 104.0, 98.0], [101.0, 97.0, 103.0]) > 0.5
    assert rounds_p([100.0, 101.0, 99.0], [150.0, 151.0, 149.0]) < 1e-4
    assert rounds_p([100.0, 100.0], [100.0, 100.0]) == 1.0 and rounds_p([100.0, 100.0], [120.0, 120.0]) == 0.0


def test_stats_from_fixed_samples():
    s = Stats.from_samples([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.time_us_min, s.time_us_p50, s.time_us_mean, s.time_us_max) == (1.0, 3.0, 3.0, 5.0)
    assert s.time_us_p95 == pytest.approx(4.8)  # linear interpolation, as numpy
    assert s.time_us_std == pytest.approx(math.sqrt(2.5))  # sample standard deviation
    assert list(s.as_dict()) == [
        f"time_us_{k}" for k in ("min", "p50", "p50_lo", "p50_hi", "mean", "mean_lo", "mean_hi", "p95", "max", "std")
    ]
    assert (s.time_us_p50_lo, s.time_us_p50_hi) == (1.0, 5.0)  # 5 samples: no pair reaches 95%


def test_single_sample_has_zero_spread():
    s = Stats.from_samples([7.0])
    assert s.time_us_p50 == s.time_us_p95 == 7.0 and s.time_us_std == 0.0


def test_percentile_interpolates():
    assert percentile([0.0, 10.0], 25) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


def test_bandwidth_follows_nccl_tests():
    # 1e9 bytes in 1 s: algbw 1 GB/s; all_gather on 4 ranks: busbw = 3/4 of it.
    algbw, busbw = bandwidth_gbps(10**9, 1e6, 3 / 4)
    assert algbw == pytest.approx(1.0) and busbw == pytest.approx(0.75)
    assert all(math.isnan(x) for x in bandwidth_gbps(8, 0.0, 1.0))


def test_a_row_of_two_modes_heads_with_the_median_of_every_iteration_and_its_note_names_the_modes():
    from commbench.results.stats import lower_mode, modes_note, split_modes

    rng = random.Random(5)
    fast = [100.0 * (1 + 0.02 * rng.random()) for _ in range(25)]
    slow = [2600.0 * (1 + 0.2 * rng.random()) for _ in range(35)]  # Gloo's slow mode: ~26x, the majority
    samples = fast + slow
    rng.shuffle(samples)
    s = Stats.from_samples(samples)
    assert split_modes(samples) == (sorted(fast), sorted(slow))
    # The headline is what most iterations took (the slow mode here), never the fast minority's median.
    assert s.time_us_p50 == percentile(sorted(samples), 50) > 2600 > lower_mode(samples)
    assert s.time_us_p50_lo < 2600 <= s.time_us_p50_hi  # 35 of 60 near a half: the interval spans both modes
    assert s.time_us_max == max(slow) and s.time_us_p95 > 2600 and s.time_us_mean > 1000
    assert modes_note(samples) == f"two modes: 35 of 60 iterations slow, from {min(slow):.4g} us"


def test_one_mode_heads_with_the_median_of_every_sample():
    from commbench.results.stats import modes_note, split_modes

    rng = random.Random(6)
    for sigma in (0.05, 0.3):
        samples = [100.0 * math.exp(rng.gauss(0, sigma)) for _ in range(200)]
        assert split_modes(samples) == (sorted(samples), [])
        assert Stats.from_samples(samples).time_us_p50 == percentile(sorted(samples), 50)
        assert modes_note(samples) is None
    # A jump among a few samples, or one slow outlier in ten, is no mode.
    assert Stats.from_samples([1.0, 2.0, 3.0, 4.0, 100.0]).time_us_p50 == 3.0
    assert Stats.from_samples([10.0] * 9 + [1000.0]).time_us_p50 == 10.0
