"""Statistics and bandwidth from fixed numbers."""

from __future__ import annotations

import math

import pytest

from commbench.results.stats import Stats, bandwidth_gbps, percentile


def test_stats_from_fixed_samples():
    s = Stats.from_samples([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.time_us_min, s.time_us_p50, s.time_us_mean, s.time_us_max) == (1.0, 3.0, 3.0, 5.0)
    assert s.time_us_p95 == pytest.approx(4.8)  # linear interpolation, as numpy
    assert s.time_us_std == pytest.approx(math.sqrt(2.5))  # sample standard deviation
    assert list(s.as_dict()) == [f"time_us_{k}" for k in ("min", "p50", "mean", "p95", "max", "std")]


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
