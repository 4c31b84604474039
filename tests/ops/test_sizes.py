"""Size parsing and the geometric sweep."""

from __future__ import annotations

import pytest

from commbench.errors import UserError
from commbench.units import format_size, parse_size, parse_size_list, round_size, size_range, sweep_length


@pytest.mark.parametrize(
    "text, expected",
    [
        ("8", 8),
        ("1K", 1024),
        ("4k", 4096),
        ("64M", 64 << 20),
        ("1G", 1 << 30),
        ("2KB", 2048),
        ("3MiB", 3 << 20),
        (" 16 ", 16),
    ],
)
def test_parse_size_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "-8", "0", "1.5K", "8X", "K", "1 0"])
def test_parse_size_rejects_garbage_zero_and_negative(text):
    with pytest.raises(UserError):
        parse_size(text)


def test_size_list_sorted_unique():
    assert parse_size_list("4M,1K,1K,8") == [8, 1024, 4 << 20]
    with pytest.raises(UserError):
        parse_size_list(",")


def test_size_range_like_nccl_tests():
    assert size_range(8, 64, 2) == [8, 16, 32, 64]
    assert size_range(1024, 1024, 2) == [1024]
    assert size_range(10, 100, 3) == [10, 30, 90]
    assert len(size_range(8, 64 << 20, 2)) == 24


def test_size_range_rejects_inverted_bounds_and_small_factor():
    with pytest.raises(UserError, match="larger than"):
        size_range(64, 8, 2)
    with pytest.raises(UserError, match="factor"):
        size_range(8, 64, 1)


def test_format_size():
    assert [format_size(n) for n in (8, 1024, 1536, 64 << 20, 1 << 30, 1000)] == [
        "8B",
        "1K",
        "1.5K",
        "64M",
        "1G",
        "1000B",
    ]


def test_one_size_formatter_three_significant_digits_and_no_offsets():
    # 1K of float32 on 3 ranks is 255 elements (1020 bytes); 64M on 3 ranks is 64M-4B: three
    # significant digits, never a round size and an offset (1K+8B) beside 1.51K.
    assert [format_size(n) for n in (1020, 1032, 1548, (64 << 20) - 4, (1 << 30) + 24, 207_950)] == [
        "1020B",
        "1.01K",
        "1.51K",
        "64M",
        "1G",
        "203K",
    ]
    # The chart's tick of a rounded size is still the round one.
    assert [round_size(n) for n in (1020, 1032, 1000, 3456)] == [1024, 1024, 1000, 3456]
    # Exact in two decimals where it can be, else three significant digits, up to terabytes.
    assert [format_size(n) for n in (3456, int(1023.5 * 2**20), int(26.1 * 2**40), 5 << 50)] == [
        "3.38K",
        "1023.5M",
        "26.1T",
        "5120T",
    ]


def _reference_range(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """nccl-tests' loop, one step at a time."""
    sizes, size = [], float(min_bytes)
    while round(size) <= max_bytes:
        if not sizes or round(size) != sizes[-1]:
            sizes.append(round(size))
        size *= factor
    return sizes


@pytest.mark.parametrize(
    "low, high, factor", [(8, 64 << 20, 2), (8, 16, 1.1), (1, 1000, 1.001), (7, 700000, 1.01), (2, 200000, 1.05)]
)
def test_size_range_equals_the_step_by_step_loop(low, high, factor):
    assert size_range(low, high, factor) == _reference_range(low, high, factor)
    assert abs(sweep_length(low, high, factor) - len(_reference_range(low, high, factor))) <= 1


def test_a_sweep_of_millions_of_sizes_is_refused_with_its_length():
    with pytest.raises(UserError, match=r"would measure about 5,206,311 sizes; a sweep measures at most 1,000"):
        size_range(8, 64 << 20, 1.000001)
    with pytest.raises(UserError, match="factor"):
        size_range(8, 64, float("nan"))
    with pytest.raises(UserError, match="factor"):
        size_range(8, 64, float("inf"))


def test_a_measured_value_is_written_without_an_exponent():
    from commbench.units import format_number

    assert [format_number(v) for v in (2.88e-05, 78.53, 2.5, 12345.6, 0.000284, 0.0, 1e-9)] == [
        "0.0000288",
        "78.5",
        "2.5",
        "12346",
        "0.000284",
        "0",
        "0.000000001",
    ]


def test_a_count_is_singular_for_one():
    from commbench.units import counted

    assert (counted(1, "rank"), counted(2, "rank"), counted(0, "rank")) == ("1 rank", "2 ranks", "0 ranks")
