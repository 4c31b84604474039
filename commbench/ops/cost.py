"""An op's textbook cost model: T(p, S) = A(p) alpha + B(p) S beta under each algorithm that
`commbench model` projects with (docs/model.md lists the sources)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

# (latency coefficient A(p), bandwidth coefficient B(p)) of T(p, S) = A(p) alpha + B(p) S beta on p
# ranks, with S as the op defines it; a reduction's compute (gamma) is folded into the per-byte term.
Coefficients = Callable[[int], tuple[float, float]]


def lg(p: int) -> float:
    """ceil(log2 p): the rounds of a tree or recursive-doubling algorithm on p ranks (0 on one)."""
    return float(math.ceil(math.log2(p))) if p > 1 else 0.0


@dataclass(frozen=True)
class Cost:
    """The op's textbook cost model under each algorithm `commbench model` projects with (its
    --algorithm choices are this class's fields); None: the algorithm has no formula for the op."""

    ring: Coefficients | None = None
    tree: Coefficients | None = None

    def of(self, algorithm: str) -> Coefficients | None:
        return getattr(self, algorithm)


ALGORITHMS = tuple(f.name for f in fields(Cost))
