"""Size parsing and the geometric sweep."""

from __future__ import annotations

import pytest

from commbench.errors import UserError
from commbench.units import format_size, parse_size, parse_size_list, size_range


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
