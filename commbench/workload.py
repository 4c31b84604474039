"""Tensor workloads as users write them (`--tensors 64x4K,8x1M,2x16M`) and the default gradient mix.

Torch-free, so `commbench list` and `--help` can describe the workloads without importing torch.
Counts are elements, with K, M, G as powers of 1024 (as sizes are in bytes) or a power-of-ten
form such as 1e7 (apex's message size default is written that way).
"""

from __future__ import annotations

import re

from commbench.errors import UserError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_COUNT = re.compile(r"^(\d+)([KMG]?)$", re.IGNORECASE)
_POWER_OF_TEN = re.compile(r"^(\d+)[eE](\d+)$")
TENSORS_SYNTAX = "a comma-separated list of [COUNTx]ELEMENTS such as 64x4K,8x1M,2x16M or 1,256,256"


def _count(text: str) -> int | None:
    """'4K' -> 4096, '1e7' -> 10000000, '0' -> 0; None when malformed (negatives included)."""
    item = text.strip()
    if (m := _COUNT.match(item)) is not None:
        return int(m.group(1)) * _UNITS[m.group(2).upper()]
    if (m := _POWER_OF_TEN.match(item)) is not None:
        return int(m.group(1)) * 10 ** int(m.group(2))
    return None


def parse_count(text: str, what: str) -> int:
    """'4K' -> 4096, '1e7' -> 10000000, '300' -> 300; zero, negatives and junk are one-line errors."""
    value = _count(text)
    if value is None:
        raise UserError(f"malformed {what} {text!r}: use a positive whole number with an optional K, M or G (e.g. 300, 4K, 1M, 1e7)")
    if value <= 0:
        raise UserError(f"{what} {text!r} must be positive")
    return value


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
        times, size = (_count(repeat) if sep else 1), _count(numel)
        if times is None or size is None:
            raise UserError(f"malformed --tensors entry {item!r} in {text!r}: give {TENSORS_SYNTAX}")
        if times <= 0 or size <= 0:
            raise UserError(f"--tensors entry {item!r} in {text!r}: counts must be positive (a zero-sized or absent tensor measures nothing)")
        numels += [size] * times
    return tuple(numels)


def transformer_gradients(layers: int = 2, width: int = 256, vocab: int = 8191) -> tuple[int, ...]:
    """Element counts of a small transformer's parameters, in the order backward produces them.

    The odd vocabulary (8191, prime) and the 1-element logit scale give tensors that are not
    multiples of common world sizes, so padding is always exercised.
    """
    per_layer = (
        width, width,  # layer norm 1
        3 * width * width, 3 * width,  # attention in-projection
        width * width, width,  # attention out-projection
        width, width,  # layer norm 2
        4 * width * width, 4 * width,  # feed-forward up
        4 * width * width, width,  # feed-forward down
    )  # fmt: skip
    model = (vocab * width, *per_layer * layers, width, width, 1)  # embedding, layers, final norm, logit scale
    return tuple(reversed(model))


DEFAULT_GRADIENTS = transformer_gradients()
DEFAULT_GRADIENTS_TEXT = (f"a 2-layer, width-256 transformer: {len(DEFAULT_GRADIENTS)} tensors, "
                          f"{sum(DEFAULT_GRADIENTS) / 1e6:.1f}M elements")  # fmt: skip
