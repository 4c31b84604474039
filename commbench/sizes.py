"""Byte sizes as users write them (8, 4K, 64M, 1G) and the geometric sweep of nccl-tests."""

from __future__ import annotations

import re

from commbench.errors import UserError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'64M' -> 67108864. Units are powers of 1024 (K, M, G; KB, KiB accepted)."""
    m = _SIZE.match(str(text))
    if not m:
        raise UserError(f"malformed size {text!r}: use a positive whole number with an optional K, M or G (e.g. 8, 4K, 64M)")
    value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value <= 0:
        raise UserError(f"size {text!r} must be positive")
    return value


def parse_size_list(text: str) -> list[int]:
    """'1K,4M' -> [1024, 4194304], sorted and without duplicates."""
    items = [s for s in str(text).split(",") if s.strip()]
    if not items:
        raise UserError(f"--sizes {text!r} holds no size: give a comma-separated list such as 1K,64K,4M")
    return sorted({parse_size(s) for s in items})


def size_range(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """min, min*f, min*f^2, ... up to max (inclusive), as nccl-tests' -b/-e/-f."""
    if min_bytes > max_bytes:
        raise UserError(f"--min-bytes ({format_size(min_bytes)}) is larger than --max-bytes ({format_size(max_bytes)}): swap them")
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
