"""Quantities as users write them: byte sizes (8, 4K, 64M, 1G), element counts (300, 4K, 1e7),
tensor lists (64x4K,2x1M), and nccl-tests' geometric size sweep.

Torch-free, so `commbench --help` and `commbench list` can describe workloads without importing
torch. K, M and G are powers of 1024; a power-of-ten form such as 1e7 is accepted too (apex
writes its message size that way).
"""

from __future__ import annotations

import re

from commbench.errors import UserError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SCALED = re.compile(r"^(\d+)\s*([KMG]?)(I?B)?$", re.IGNORECASE)
_POWER_OF_TEN = re.compile(r"^(\d+)E(\d+)\s*(I?B)?$", re.IGNORECASE)
TENSORS_SYNTAX = "a comma-separated list of [COUNTx]ELEMENTS such as 64x4K,8x1M,2x16M or 1,256,256"


def _quantity(text: str, *, bytes_suffix: bool) -> int | None:
    """'4K' -> 4096, '1e7' -> 10000000, '0' -> 0; None when malformed (negatives included).

    bytes_suffix admits a trailing B or iB (4KB, 4KiB) for byte sizes.
    """
    item = str(text).strip()
    for pattern in (_SCALED, _POWER_OF_TEN):
        if (m := pattern.match(item)) is None or (m.group(3) and not bytes_suffix):
            continue
        if pattern is _SCALED:
            return int(m.group(1)) * _UNITS[m.group(2).upper()]
        return int(m.group(1)) * 10 ** int(m.group(2)) if int(m.group(2)) <= 30 else None
    return None


def _positive(text: str, what: str, *, bytes_suffix: bool, examples: str) -> int:
    value = _quantity(text, bytes_suffix=bytes_suffix)
    if value is None:
        raise UserError(
            f"malformed {what} {text!r}: use a positive whole number with an optional K, M or G (e.g. {examples})"
        )
    if value <= 0:
        raise UserError(f"{what} {text!r} must be positive")
    return value


def parse_size(text: str) -> int:
    """'64M' -> 67108864 bytes (KB, KiB and 1e6 accepted too)."""
    return _positive(text, "size", bytes_suffix=True, examples="8, 4K, 64M")


def parse_count(text: str, what: str) -> int:
    """'4K' -> 4096 elements, '1e7' -> 10000000; zero, negatives and junk are one-line errors."""
    return _positive(text, what, bytes_suffix=False, examples="300, 4K, 1M, 1e7")


def parse_size_list(text: str) -> list[int]:
    """'1K,4M' -> [1024, 4194304], sorted and without duplicates."""
    items = [s for s in str(text).split(",") if s.strip()]
    if not items:
        raise UserError(f"--sizes {text!r} holds no size: give a comma-separated list such as 1K,64K,4M")
    return sorted({parse_size(s) for s in items})


def size_range(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """min, min*f, min*f^2, ... up to max (inclusive), as nccl-tests' -b/-e/-f."""
    if min_bytes > max_bytes:
        raise UserError(
            f"--min-bytes ({format_size(min_bytes)}) is larger than --max-bytes ({format_size(max_bytes)}): swap them"
        )
    if factor <= 1:
        raise UserError(f"--factor must be greater than 1 (got {factor:g})")
    sizes, size = [], float(min_bytes)
    while round(size) <= max_bytes:
        if not sizes or round(size) != sizes[-1]:
            sizes.append(round(size))
        size *= factor
    return sizes


def format_size(n: int) -> str:
    """Human units for tables and chart axes: 8B, 1K, 1.5K, 64M."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:g}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{n}B"


def format_count(n: int) -> str:
    """The shortest exact spelling parse_count reads back: 4096 -> '4K', 10**7 -> '1e7', 300 -> '300'."""
    for unit in ("G", "M", "K"):
        if n >= _UNITS[unit] and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    digits = str(n)
    zeros = len(digits) - len(digits.rstrip("0"))
    return f"{digits[:-zeros]}e{zeros}" if zeros >= 4 else digits


def parse_tensors(text: str) -> tuple[int, ...]:
    """'64x4K,2x1M' -> 64 entries of 4096 then 2 of 1048576: element counts, in order."""
    numels: list[int] = []
    items = [item.strip() for item in str(text).split(",")]
    if not any(items):
        raise UserError(f"--tensors {text!r} holds no tensor: give {TENSORS_SYNTAX}")
    for item in items:
        repeat, sep, numel = item.lower().rpartition("x")
        times = _quantity(repeat, bytes_suffix=False) if sep else 1
        size = _quantity(numel, bytes_suffix=False)
        if times is None or size is None:
            raise UserError(f"malformed --tensors entry {item!r} in {text!r}: give {TENSORS_SYNTAX}")
        if times <= 0 or size <= 0:
            raise UserError(
                f"--tensors entry {item!r} in {text!r}: counts must be positive (a zero-sized or absent tensor measures nothing)"
            )
        numels += [size] * times
    return tuple(numels)
