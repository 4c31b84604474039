"""An op's check: the number of elements of a result that differ from what it must be (nccl-tests' #wrong)."""

from __future__ import annotations

from typing import Any

from commbench.lazy import torch


def count_wrong(actual: Any, expected: Any, tolerance: tuple[float, float] | None = None) -> int:
    """Number of elements of actual that differ from expected (nccl-tests' #wrong).

    tolerance=(rtol, atol) is for results that are computed, not moved (e.g. sync_bn's normalised
    output against a float64 reference). By default inputs are small integers, so float32/64 and
    ints must match exactly, while half types may round partial sums of many ranks.
    """
    if actual.shape != expected.shape:
        return max(actual.numel(), expected.numel())
    return int(wrong_elements(actual, expected, tolerance).item())


def wrong_elements(actual: Any, expected: Any, tolerance: tuple[float, float] | None = None) -> Any:
    """count_wrong's count as a 0-dimensional int64 tensor on actual's device: summing such counts
    over chunks reads the device once, at the end. Shapes must match."""
    rtol, atol = tolerance or ({torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}.get(expected.dtype, 0.0), 0.0)
    if not (rtol or atol):  # exact: compared as they are, without two float64 copies of a large result
        return (actual != expected).sum()
    return (~torch.isclose(actual.double(), expected.double(), rtol=rtol, atol=atol)).sum()
