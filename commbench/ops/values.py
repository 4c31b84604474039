"""Known values for op buffers, written and checked a chunk at a time.

An op states the values of each buffer once, as a formula of the flat index that gives small
integers (exact in every dtype). `write` fills a tensor in place and `wrong` counts the elements
that differ from the formula, CHUNK elements at a time, so neither builds a full-size temporary:
an int64 index of a whole buffer costs 2-8 times the buffer, and a full expected copy as much as
the result. Values that repeat with a period are computed for one block only: `write` copies the
written prefix forward (copy speed, so an in-place op can refill its input before every sample
without keeping a copy of it) and `wrong` compares every block against that one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from commbench.lazy import torch
from commbench.ops.check import wrong_elements

# Elements per chunk: the temporaries of one chunk (the int64 index, the formula's terms, the float64
# copies a tolerant comparison makes) stay at a few MiB, next to buffers of hundreds.
CHUNK = 1 << 16


# Significand bits of the half types: their integers are exact up to 2^bits.
HALF_BITS = {"bfloat16": 8, "float16": 11}


def sum_tolerance(dtype: Any, terms: int, largest: float | None) -> tuple[float, float] | None:
    """count_wrong's tolerance for a sum of `terms` positive values up to `largest` reduced in dtype.

    While every partial sum stays within the half type's exact integers, the default holds (None).
    Beyond, each partial sum the transport rounds (one per hop of a ring, at most terms - 1) is off by
    at most half a unit in its last place, 2^-bits of it; partial sums are at most the whole, so the
    result is off by at most (terms - 1) 2^-bits relative. The expected value it is compared with, the
    exact sum converted to dtype, is rounded once too: terms 2^-bits between them (bfloat16 from about
    24 ranks of values up to 11). Exact types and small sums get None: the default rules.
    """
    bits = HALF_BITS.get(str(dtype).removeprefix("torch."))
    if bits is None or largest is None or largest <= 2.0**bits:
        return None
    default = 2.0 ** (1 - bits)  # count_wrong's own: 2^-7 for bfloat16, 2^-10 for float16
    return max(default, terms * 2.0**-bits), 0.0


@dataclass(frozen=True)
class Values:
    """The values of a flat buffer: formula(int64 flat indices) -> values (any integer dtype, or the
    buffer's own). period: formula(i + period) == formula(i) for every i, when that holds. largest:
    the largest value (None: unknown); terms: how many values each one sums (summed() counts them),
    which sets the rounding a half type's reduction may add (sum_tolerance)."""

    formula: Callable[[Any], Any]
    period: int | None = None
    largest: float | None = None
    terms: int = 1

    def at(self, start: int, stop: int, device: Any) -> Any:
        """The values at flat indices [start, stop)."""
        return self.formula(torch.arange(start, stop, device=device))

    def write(self, out: Any, start: int = 0) -> None:
        """Set out's elements (in flat order) to the values at start, start + 1, ..., in out's dtype."""
        flat, block = out.view(-1), self._block()
        count = flat.numel()
        head = min(count, block or count)
        for lo in range(0, head, CHUNK):
            hi = min(lo + CHUNK, head)
            flat[lo:hi].copy_(self.at(start + lo, start + hi, flat.device))
        done = head  # a multiple of the period from here on, until the last copy
        while done < count:
            step = min(done, count - done)
            flat[done : done + step].copy_(flat[:step])
            done += step

    def wrong(self, actual: Any, start: int = 0) -> int:
        """Elements of actual (in flat order) that differ from the values at start, start + 1, ...
        converted to actual's dtype (count_wrong's rules, chunk by chunk, with sum_tolerance for sums).

        The counts stay on the device until the end: one host synchronisation per buffer, not one
        per chunk (4,000 per GiB on a GPU)."""
        flat, block = actual.view(-1), self._block()
        count = flat.numel()
        step = block or CHUNK
        tolerance = sum_tolerance(flat.dtype, self.terms, self.largest)
        expected = self.at(start, start + min(step, count), flat.device).to(flat.dtype) if block else None
        if block and count > block and _repeats(flat, block):
            # Every block is a bit-for-bit copy of the first, so its count is the whole count's part:
            # each whole block has the first's, the tail that of the first's first elements.
            whole, tail = divmod(count, block)
            total = wrong_elements(flat[:block], expected, tolerance) * whole
            if tail:
                total += wrong_elements(flat[:tail], expected[:tail], tolerance)
            return int(total.item())
        total = None
        for lo in range(0, count, step):
            hi = min(lo + step, count)
            want = expected[: hi - lo] if block else self.at(start + lo, start + hi, flat.device).to(flat.dtype)
            part = wrong_elements(flat[lo:hi], want, tolerance)
            total = part if total is None else total.add_(part)
        return 0 if total is None else int(total.item())

    def _block(self) -> int | None:
        """Elements computed once and repeated: the whole periods that fit in a chunk (None: no period)."""
        if self.period is None or self.period > CHUNK:
            return None
        return CHUNK // self.period * self.period


# The integer type of each element size: a bit-for-bit comparison that no NaN or -0.0 can fool.
_BITS = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def _repeats(flat: Any, period: int) -> bool:
    """A host buffer that repeats with this period bit for bit: flat[i] == flat[i - period] for every
    i >= period. One vectorised pass over the buffer, against a comparison per chunk of it: a 64 MiB
    result is checked in about 5 ms instead of 30 on one core. False where it cannot tell (a device
    buffer, a strided one): the caller then counts chunk by chunk, as it would anyway."""
    bits = _BITS.get(flat.element_size())
    if flat.device.type != "cpu" or not flat.is_contiguous() or bits is None:
        return False
    import numpy

    raw = flat.view(getattr(torch, bits)).numpy()
    return bool(numpy.array_equal(raw[period:], raw[:-period]))


def chunk_temporaries(largest_buffer_bytes: float) -> int:
    """Bytes the fill and check of buffers up to this size add at most, for memory estimates: about
    128 bytes per element of a chunk (measured: up to 7.6 MiB for full chunks, checking bfloat16
    against a tolerance; 2-4 MiB otherwise)."""
    return 128 * min(CHUNK, int(largest_buffer_bytes))


def summed(parts: Sequence[Values]) -> Values:
    """The elementwise sum of several values: what a sum over ranks leaves."""
    period = math.lcm(*(p.period for p in parts if p.period)) if all(p.period for p in parts) else None
    largest = None if any(p.largest is None for p in parts) else sum(p.largest or 0.0 for p in parts)
    return Values(lambda i: sum(p.formula(i) for p in parts), period, largest, sum(p.terms for p in parts))


# The value pattern of the ops that move one tensor per rank (all_gather, all_reduce, broadcast, reduce,
# gather, scatter, sendrecv): one formula, so each op's check is the others'.
def contribution(rank: int) -> Values:
    """Rank r's input at index j: (3r + j) % 11 + 1, small integers exact in every dtype."""
    return Values(lambda j: (j + 3 * rank) % 11 + 1, period=11, largest=11)


def gathered_wrong(parts: list[Any]) -> int:
    """Wrong elements of a gathered result: part r must hold rank r's contribution."""
    return sum(contribution(r).wrong(part) for r, part in enumerate(parts))
