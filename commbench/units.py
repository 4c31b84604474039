"""Quantities as users write them: byte sizes (8, 4K, 64M, 1G), element counts (300, 4K, 1e7),
tensor lists (64x4K,2x1M), and nccl-tests' geometric size sweep.

Torch-free, so `commbench --help` and `commbench list` can describe workloads without importing
torch. K, M and G are powers of 1024; a power-of-ten form such as 1e7 is accepted too (apex
writes its message size that way).
"""

from __future__ import annotations

import math
import re

from commbench.errors import UserError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# More sizes than anyone reads on a chart, and hours of measuring: a sweep this long is a typo (-f 1.000001).
MAX_SIZES = 1000
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
    items = str(text).split(",")
    if not any(s.strip() for s in items):
        raise UserError(f"--sizes {text!r} holds no size: give a comma-separated list such as 1K,64K,4M")
    if not all(s.strip() for s in items):
        raise UserError(f"--sizes {text!r} has an empty item (two commas in a row, or one at an end): remove it")
    sizes = sorted({parse_size(s) for s in items})
    if len(sizes) > MAX_SIZES:
        raise UserError(f"--sizes lists {len(sizes):,} sizes; a sweep measures at most {MAX_SIZES:,}: list fewer")
    return sizes


def size_range(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """min, min*f, min*f^2, ... rounded to whole bytes, up to max (inclusive), as nccl-tests' -b/-e/-f.

    A sweep longer than MAX_SIZES is refused from its length alone, before any size is listed.
    """
    if min_bytes > max_bytes:
        raise UserError(
            f"--min-bytes ({format_size(min_bytes)}) is larger than --max-bytes ({format_size(max_bytes)}): swap them"
        )
    if not 1 < factor < math.inf:
        raise UserError(f"--factor must be a finite number greater than 1, such as 2 or 1.5 (got {factor})")
    if (length := sweep_length(min_bytes, max_bytes, factor)) > MAX_SIZES:
        raise UserError(
            f"-b {format_size(min_bytes)} -e {format_size(max_bytes)} -f {factor} would measure about {length:,} "
            f"sizes; a sweep measures at most {MAX_SIZES:,}: raise --factor (2 gives "
            f"{sweep_length(min_bytes, max_bytes, 2)}) or list --sizes"
        )
    # Every whole number up to the last step below `dense`, then one size per step.
    size = min_bytes * factor ** math.floor(
        math.log(_dense_below(min_bytes, max_bytes, factor) / min_bytes) / math.log(factor)
    )
    sizes = list(range(min_bytes, round(size)))
    while round(size) <= max_bytes:
        if not sizes or round(size) > sizes[-1]:
            sizes.append(round(size))
        size *= factor
    return sizes


def _dense_below(min_bytes: int, max_bytes: int, factor: float) -> int:
    """Below this size one step adds less than a byte, so the rounded sweep holds every whole number."""
    return min(max_bytes, max(min_bytes, math.ceil(1 / (factor - 1))))


def sweep_length(min_bytes: int, max_bytes: int, factor: float) -> int:
    """How many sizes size_range(min, max, factor) holds (to within one), counted without listing them."""
    dense = _dense_below(min_bytes, max_bytes, factor)
    return dense - min_bytes + math.floor(math.log(max_bytes / dense) / math.log(factor)) + 1


def format_size(n: int) -> str:
    """The one spelling of a byte size, in tables, chart axes, reports and messages: 8B, 1K, 1.5K,
    64M, 2.6T. Exact in at most two decimals where it can be (1.5K, 2.25K), else three significant
    digits (a requested 1K rounded to 1032 bytes reads 1.01K); never an exponent."""
    for unit, scale in _SCALES:
        if n >= scale:
            value = n / scale
            if value == round(value, 2):  # exact in at most two decimals: 1K, 1.5K, 2.25K
                return f"{value:.2f}".rstrip("0").rstrip(".") + unit
            decimals = max(0, 2 - int(math.log10(value)))  # three significant digits, or a whole number
            return f"{value:.{decimals}f}".rstrip("0").rstrip(".") + unit if decimals else f"{value:.0f}{unit}"
    return f"{n}B"


def round_size(n: int) -> int:
    """The round size n is a few bytes off (1032 -> 1024), or n itself: where a chart puts its tick."""
    near = _near_round(n)
    return n if near is None else n - near[2]


_SCALES = (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10))


def _near_round(n: int) -> tuple[int, str, int] | None:
    """(whole, unit, bytes off) when n is within 1% and 1K of a whole number of units, not on it."""
    for unit, scale in _SCALES:
        whole = round(n / scale)
        off = n - whole * scale
        if whole >= 1 and off and abs(off) < min(1024, n / 100):
            return whole, unit, off
        if n >= scale:
            return None
    return None


def format_number(value: float, digits: int = 3) -> str:
    """A measured value to `digits` significant digits, never with an exponent (a console line is
    read, not parsed): 2.88e-05 -> 0.0000288, 78.53 -> 78.5, 2.50 -> 2.5, 12345.6 -> 12346."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def counted(n: int, noun: str) -> str:
    """'1 rank', '2 ranks': a count and its noun, plural when it is not one."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


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
