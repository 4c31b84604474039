"""One measurement record: what a case measured and what came out.

The timed loop (commbench/run/harness.py) returns it and the sink (commbench/run/sink.py)
writes it as a row; nothing copies it field by field in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from commbench.results.timing import PERF_COUNTER


@dataclass(frozen=True)
class Measurement:
    """One (op, variant, phase, dtype, size) measured on every rank, in one or more rounds."""

    op: str
    variant: str
    phase: str
    dtype: str  # torch's name without its module: float32
    size_bytes: int  # S
    count: int
    bus_factor: float | None  # None: latency only, no bandwidth
    rounds_us: Sequence[Sequence[float]]  # per round, per iteration: the max over ranks
    # Per rank, every iteration in order (rounds concatenated): on rank 0, and only when the case
    # keeps them (--raw's samples file is their one consumer); empty otherwise.
    per_rank_us: Sequence[Sequence[float]]
    wrong: int  # summed over ranks; -1 when the check was skipped
    calls: float  # collective calls per op iteration
    apis: str  # the API names those calls used
    window: int
    note: str = ""
    timer: str = PERF_COUNTER  # how the samples were timed (commbench/results/timing.py)
    # --overlap: per round, the compute kernel alone and the op with the kernel run beside it.
    compute_rounds_us: Sequence[Sequence[float]] = ()
    overlapped_rounds_us: Sequence[Sequence[float]] = ()
    compute_flops: float | None = None
    # The sweep stopped before the case's last round (where its correctness check runs): its row is
    # written from the rounds it has, with status `stopped`, never `ok`.
    stopped: bool = False

    @property
    def samples_us(self) -> list[float]:
        """Every round's samples, pooled."""
        return [t for block in self.rounds_us for t in block]
